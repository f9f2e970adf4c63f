"""What a stage process leaves for the driver: its config file, partial results and log tails.

The driver (``runner``) and every stage (``stages``, ``claims``) use these; the stages never import
the driver or each other, so a stage process loads only what it runs. Every stage keeps each row the moment
it is measured (``keep_row``: the partial JSON rewritten atomically, one line printed into the stage's log), so
a stage stopped, killed or crashed between rows still reports every row before it.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from megatron_crossbert.fsutil import atomic_write_text

from .program import DeviceCheckConfig


def tail_lines(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def log_tails(folder: Path, since: float, pattern: str = "*.log", lines: int = 20) -> dict[str, str]:
    """The last lines of every log under ``folder`` written since ``since``: the scratch folder
    never comes back from the device, so a failure's evidence must travel in the result JSON."""
    logs = sorted(path for path in folder.rglob(pattern) if path.stat().st_mtime >= since)
    return {str(path.relative_to(folder)): tail_lines(path.read_text(errors="replace"), lines) for path in logs}


def partial_path(work_dir: Path, name: str) -> Path:
    return work_dir / f"stage-{name}.partial.json"


def save_partial(work_dir: Path, name: str, result: dict) -> None:
    """What a stage has so far, replaced atomically: the driver reports it if the stage never writes its result
    (stopped at its deadline, killed, crashed)."""
    atomic_write_text(partial_path(work_dir, name), json.dumps(result, indent=1, default=str))


def read_partial(work_dir: Path, name: str) -> dict | None:
    """The stage's last saved partial result, or None if it saved none."""
    path = partial_path(work_dir, name)
    return json.loads(path.read_text()) if path.is_file() else None


def keep_row(work_dir: Path, name: str, result: dict, key: str, row: dict) -> None:
    """Append ``row`` to ``result[key]``, print it as one line (the log streams to ``$OUT``) and save the
    partial result."""
    result.setdefault(key, []).append(row)
    print(f"[{name}] {key} {json.dumps(row, default=str)}", flush=True)
    save_partial(work_dir, name, result)


def write_stage_config(config: DeviceCheckConfig, path: Path) -> Path:
    path.write_text(json.dumps(asdict(config)))
    return path
