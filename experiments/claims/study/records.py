"""A study's records: what a finished run leaves behind that outlives its work dir.

A long study spans working sessions, and a session's machine need not keep the work dir: checkpoints are tens
of MB a run, too large to keep anywhere but there. So a run is **sealed** once it is trained and every
checkpoint the plan reads is probed: its held-out losses, its probe JSONs, its commands and its CPU seconds go
to the records folder (``--records``: small JSON files, meant to be committed). The next session's fresh work
dir is seeded from the records after its data stage: a sealed run counts as complete without its checkpoints
(``train_stage.is_complete``, ``valid_losses``), so only unsealed runs train, and the page is built from both.

Records are checked before they are used:

* ``keys.json`` holds what every sealed result depends on besides its own run: the data stage's key, the probe
  key, and the identity of the tokenizer and the indexed dataset the data stage rebuilt. A difference is one
  error naming the file: records of another plan, or a data stage that did not rebuild the same data, are
  never mixed into a page.
* Each ``runs/<name>.json`` holds its run's training key; a record whose key differs from the plan's is refused.

``sessions.json`` counts every invocation's CPU seconds (rewritten after each stage), so the page can say how
many sessions and CPU-hours the study took, restarted work included.
"""

from __future__ import annotations

import calendar
import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path

from .stage_keys import SHOWN, key_differences
from megatron_crossbert.content_identity import dataset_fingerprint
from megatron_crossbert.fsutil import atomic_write_text

SEAL_FILE = "sealed.json"
"""In a work dir's ``runs/<name>/``: the record a restored run is complete by (no checkpoints beside it)."""
KEYS_FILE = "keys.json"
SESSIONS_FILE = "sessions.json"
CPU_FIELD = "cpu_seconds"
"""A study run's record: its CPU seconds by stage (``train``, ``probe``)."""
COST_FIELD = "cost"
"""A row's record (a sweep's, an ablation's): its wall and CPU seconds, ``{wall_s, cpu_s, ...}``."""


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a readable record ({err})") from None


def _write(path: Path, value: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(value, indent=1, sort_keys=True) + "\n")


def data_identity(tokenizer: Path, prefix: str) -> dict:
    """The tokenizer (its fingerprint: the ids' meanings, not its files' bytes, which sentencepiece varies run to
    run) and the indexed dataset by content: what the data stage must rebuild the same."""
    from megatron_crossbert.data.tokenizers.fingerprint import tokenizer_fingerprint
    from megatron_crossbert.data.tokenizers.tokenizer import load_tokenizer

    return {"tokenizer": tokenizer_fingerprint(load_tokenizer(str(tokenizer))),
            "dataset": dataset_fingerprint([prefix + ".bin", prefix + ".idx"])}


def check_keys(records: Path, keys: dict) -> None:
    """Record ``keys`` (first use) or refuse in one line, naming the fields, when the records were made with other
    ones (``stage_keys.key_differences``: the one comparison of recorded keys with a plan's)."""
    path = records / KEYS_FILE
    if not path.is_file():
        _write(path, keys)
        return
    changed = key_differences(_read(path), keys)
    if changed:
        raise ValueError(f"{path}: these records were made with other data or probe settings than this study's "
                         f"({'; '.join(changed[:SHOWN])}); nothing was restored: use another --records for this "
                         "plan or data")


def seal(records: Path, name: str, key: dict, losses: dict[int, float], probes: list[Path],
         commands: list[dict], cpu: dict[str, float] | None = None, cost: dict[str, float] | None = None) -> Path:
    """Write ``name``'s record (training key, held-out losses, commands, and its CPU seconds by stage (``cpu``,
    the study's runs) or its whole cost (``cost``: ``wall_s``, ``cpu_s``, ...; a sweep's or an ablation's row))
    and copy its probe JSONs; the record is written last, so a record on disk always has its probes beside it."""
    folder = records / "probes" / name
    folder.mkdir(parents=True, exist_ok=True)
    for probe in probes:
        shutil.copyfile(probe, folder / probe.name)
    path = records / "runs" / f"{name}.json"
    spent = {**({} if cpu is None else {CPU_FIELD: cpu}), **({} if cost is None else {COST_FIELD: cost})}
    _write(path, {"name": name, "key": key, "losses": {str(k): v for k, v in sorted(losses.items())},
                  "probes": sorted(probe.name for probe in probes), "commands": commands, **spent,
                  "sealed_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    return path


def cost(record: dict) -> dict[str, float]:
    """A row's ``{wall_s, cpu_s, ...}``; the sweep's first records kept it under ``CPU_FIELD``, read here too."""
    if COST_FIELD in record:
        return record[COST_FIELD]
    legacy = record.get(CPU_FIELD, {})
    return legacy if "cpu_s" in legacy else {}


def is_sealed(records: Path, name: str) -> bool:
    return (records / "runs" / f"{name}.json").is_file()


def restore(records: Path, name: str, key: dict, run_folder: Path | None, probe_folder: Path) -> dict | None:
    """Seed a work dir with ``name``'s record: its probe JSONs, and ``SEAL_FILE`` in ``run_folder`` (None: a row
    with no run of its own, which reads another run's checkpoint). Returns the record (None when there is none);
    a record made with another training key is refused in one line."""
    path = records / "runs" / f"{name}.json"
    if not path.is_file():
        return None
    record = _read(path)
    changed = key_differences(record.get("key", {}), key, config=True)
    if changed:
        raise ValueError(f"{path}: run {name} was made with another configuration than this plan's "
                         f"({'; '.join(changed[:SHOWN])}); nothing was restored: use another --records for this plan")
    probe_folder.mkdir(parents=True, exist_ok=True)
    for probe in record.get("probes", []):
        if not (probe_folder / probe).is_file():
            shutil.copyfile(records / "probes" / name / probe, probe_folder / probe)
    if run_folder is not None and _reaches_further(record, run_folder / SEAL_FILE):
        run_folder.mkdir(parents=True, exist_ok=True)
        _write(run_folder / SEAL_FILE, record)
    return record


def _reaches_further(record: dict, seal: Path) -> bool:
    """Whether ``record`` says its run was trained further than the record already beside it (none: it does), so
    a run sealed part-way and again at its end is restored as trained to its end, whatever the order."""
    whole = sys.maxsize
    return not seal.is_file() or sealed_steps(record, whole) > sealed_steps(_read(seal), whole)


def sealed_record(run_folder: Path) -> dict | None:
    """The restored record in a work dir's run folder, or None."""
    path = run_folder / SEAL_FILE
    return _read(path) if path.is_file() else None


def sealed_steps(record: dict, steps: int) -> int:
    """The step a sealed run was trained to: the step its key names when it was sealed part-way (an ablation row
    read before its run's end, as an early row is), else ``steps``, its whole schedule."""
    step = record.get("key", {}).get("step")
    return steps if step is None else int(step)


def note_session(records: Path, started: float, cpu: float, session: str | None = None) -> None:
    """Rewrite this invocation's entry of ``sessions.json``: its machine boot, start, last update, CPU seconds
    (the process and its finished children), and its working session's label when it was given one."""
    path = records / SESSIONS_FILE
    sessions = _read(path) if path.is_file() else {}
    entry = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(started))} {socket.gethostname()} {os.getpid()}"
    sessions[entry] = {"boot": _boot_id(), "updated_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "cpu_seconds": round(cpu, 1), **({"session": session} if session else {})}
    _write(path, sessions)


def _boot_id() -> str:
    """The machine boot this process runs in: a working session's machine is booted for it."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return socket.gethostname()


SESSION_GAP_S = 30 * 60
"""A pause longer than this with no study process started or reporting begins a new working session: a machine
can be kept across sessions (the same boot), so boots alone undercount them."""


def _utc(stamp: str) -> float:
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))


def count_sessions(sessions: dict) -> int:
    """Working sessions over ``sessions.json``'s entries: the distinct labels of those given one (``--session``);
    among the others, a new one at each new machine boot, or after a pause of more than ``SESSION_GAP_S`` since
    every earlier process last reported (a kept machine and short pauses between sessions make this undercount,
    which is what the labels are for)."""
    labels = {entry["session"] for entry in sessions.values() if entry.get("session")}
    spans = sorted((_utc(key.split(" ", 1)[0]), _utc(entry["updated_utc"]), entry.get("boot", key))
                   for key, entry in sessions.items() if not entry.get("session"))
    count, last_seen, last_boot = 0, None, None
    for start, updated, boot in spans:
        if last_seen is None or boot != last_boot or start - last_seen > SESSION_GAP_S:
            count += 1
            last_seen = start
        last_seen, last_boot = max(last_seen, updated), boot
    return len(labels) + count


def sessions_summary(records: Path) -> dict:
    """``{"sessions", "invocations", "cpu_hours"}`` over ``sessions.json``: working sessions (``count_sessions``),
    processes, and every process's CPU (restarted work included)."""
    path = records / SESSIONS_FILE
    sessions = _read(path) if path.is_file() else {}
    cpu = sum(entry["cpu_seconds"] for entry in sessions.values())
    return {"sessions": count_sessions(sessions), "invocations": len(sessions), "cpu_hours": cpu / 3600}
