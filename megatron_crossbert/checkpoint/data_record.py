"""What data a checkpoint was trained on, and whether a resume continues on the same data.

A resumed run's sample stream is "sample ``consumed_samples`` onward of this run's blend". On other
data the same index means other samples, and nothing else would notice: the tokenizer may be
the same, and so are the shapes. Every checkpoint records its data (``checkpoint.data.json``, beside
``checkpoint.tokenizer.json``): each dataset of the blend with its weight, its files' sizes and a
fingerprint (xxh3-128 of every ``.idx``/``.json`` file, which holds the document and sequence
lengths, plus 16 blocks of 64 KiB spread over every ``.bin``: cheap on TB-sized data; a same-length
edit inside an unsampled block with an unchanged index is the one change it can miss), and the
``consumed_samples`` of the save. ``data.split``, ``data.seq_length`` and the masking and training seeds
(``STREAM_FIELDS``) come from the saved ``run_config.json``, so they are compared for every checkpoint, older
ones included (this module is their one owner; ``verify.config_mismatches`` compares the model only).

Datasets are compared by content, position by position in the blend, not by path: a dataset moved
to another filesystem is the same data. Differences refuse the resume in one line unless
``checkpoint.allow_data_change`` (``--allow-data-change``), which logs them and where the new
stream starts. ``init_from`` starts a fresh stream and compares nothing.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from pathlib import Path

from megatron_crossbert.checkpoint.errors import CheckpointError, DataChangedError
from megatron_crossbert.config import RunConfig
from megatron_crossbert.content_identity import dataset_fingerprint
from megatron_crossbert.fsutil import atomic_write_text

logger = logging.getLogger(__name__)

RECORD_FILE = "checkpoint.data.json"
_STATIC_PARTS = ("samples", "visible", "targets")
_warned: set[str] = set()


def dataset_files(prefix: str, static: bool) -> list[str]:
    """The files one dataset of the blend is read from (static mask pairs have three pairs and a meta file)."""
    if not static:
        from megatron_crossbert.data.indexed.blend_file import blend_files, is_blend_file
        from megatron_crossbert.data.indexed.writer import require_pair

        if is_blend_file(prefix):
            return blend_files(prefix)  # a missing shard: one line naming the blend file and the entry
        require_pair(prefix, "data.data_path")
        return [f"{prefix}.bin", f"{prefix}.idx"]
    return [f"{prefix}_{part}{ext}" for part in _STATIC_PARTS for ext in (".bin", ".idx")] + [f"{prefix}_meta.json"]


@functools.lru_cache(maxsize=8)
def _identity(prefix: str, static: bool, stats: tuple[tuple[str, int, int], ...]) -> dict:
    """Sizes and fingerprint of one dataset; ``stats`` (name, size, mtime) keys the cache."""
    return {"prefix": str(Path(prefix).absolute()), "bytes": {Path(p).name: size for p, size, _ in stats},
            "fingerprint": dataset_fingerprint(path for path, _, _ in stats)}


def _datasets(run_cfg: RunConfig) -> list[tuple[str, float | None, bool]]:
    """(resolved prefix, blend weight, static mask pairs?) for each dataset of the run, in blend order."""
    from megatron_crossbert.data.indexed.reader import resolve_prefix

    if run_cfg.data.static_masks:
        return [(run_cfg.data.static_masks, None, True)]
    if not run_cfg.data.data_path:
        return []
    prefixes, weights = run_cfg.data.blend()
    return [(resolve_prefix(p), w, False) for p, w in zip(prefixes, weights or [None] * len(prefixes))]


def run_blend(run_cfg: RunConfig) -> list[dict]:
    """This run's datasets as recorded (computed once per process while the files are unchanged)."""
    blend = []
    for prefix, weight, static in _datasets(run_cfg):
        stats = []
        for path in dataset_files(prefix, static):
            stat = os.stat(path)
            stats.append((path, stat.st_size, stat.st_mtime_ns))
        blend.append(dict(_identity(prefix, static, tuple(stats)), weight=weight))
    return blend


def write_data_record(ckpt_dir: Path, run_cfg: RunConfig, consumed_samples: int) -> None:
    """Rank 0, before run_config.json marks the save complete; nothing for synthetic-id runs."""
    blend = run_blend(run_cfg)
    if blend:
        record = {"version": 1, "blend": blend, "consumed_samples": consumed_samples}
        atomic_write_text(ckpt_dir / RECORD_FILE, json.dumps(record, indent=1) + "\n")


def read_data_record(ckpt_dir: Path) -> dict | None:
    path = ckpt_dir / RECORD_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        return {"blend": list(record["blend"]), "consumed_samples": int(record["consumed_samples"])}
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{path}: not a readable data record ({type(err).__name__}: {err})") from None


def blend_differences(old: list[dict], new: list[dict]) -> list[str]:
    """Per dataset position: the first of weight, file sizes, fingerprint that differs."""
    if len(old) != len(new):
        names = [", ".join(d["prefix"] for d in blend) or "synthetic ids" for blend in (old, new)]
        return [f"data.data_path: checkpoint blends {len(old)} dataset(s) ({names[0]}), run {len(new)} ({names[1]})"]
    diffs = []
    for i, (a, b) in enumerate(zip(old, new)):
        where = b["prefix"] if a["prefix"] == b["prefix"] else f"{a['prefix']} -> {b['prefix']}"
        for key, label in (("weight", "blend weight"), ("bytes", "file sizes"), ("fingerprint", "content fingerprint")):
            if a.get(key) != b.get(key):
                diffs.append(f"dataset {i + 1} ({where}): {label} {a.get(key)} vs {b.get(key)}")
                break
    return diffs


STREAM_FIELDS = ("data.split", "data.seq_length", "masking.seed", "training.seed")
"""Settings of the saved ``run_config.json`` that decide the sample stream past the resumed step: the split and
length cut the documents; the masking seed draws every sample's masks, the training seed the data order and
dropout. Another run's checkpoint copied into a save dir differs here although its model fits."""


def data_differences(ckpt_dir: Path, saved: RunConfig, current: RunConfig) -> tuple[list[str], int | None]:
    """(every difference that changes the sample stream, the checkpoint's consumed samples if recorded)."""
    diffs = [f"{key}: checkpoint {saved.value_at(key)!r} vs run {current.value_at(key)!r}"
             for key in STREAM_FIELDS if saved.value_at(key) != current.value_at(key)]
    record = read_data_record(ckpt_dir)
    if record is None:
        if _datasets(current) and str(ckpt_dir) not in _warned:
            _warned.add(str(ckpt_dir))
            logger.warning("%s has no %s (saved by an older version): its datasets cannot be compared with this "
                           "run's", ckpt_dir, RECORD_FILE)
        return diffs, None
    return diffs + blend_differences(record["blend"], run_blend(current)), record["consumed_samples"]


def check_resume_data(ckpt_dir: Path, saved: RunConfig, current: RunConfig) -> tuple[str, ...]:
    """Resume: DataChangedError when the data differs, unless checkpoint.allow_data_change (then the
    differences are logged with where the new stream starts, and returned)."""
    diffs, consumed = data_differences(ckpt_dir, saved, current)
    if not diffs:
        return ()
    where = f"sample {consumed}" if consumed is not None else "the checkpoint's consumed-sample count"
    if not current.checkpoint.allow_data_change:
        raise DataChangedError(f"{ckpt_dir}: this run's data differs from the checkpoint's "
                               f"({'; '.join(diffs)}); resuming would continue at {where} of other data. Set "
                               f"--allow-data-change (checkpoint.allow_data_change) if the change is deliberate")
    logger.warning("resume from %s on changed data, allowed by checkpoint.allow_data_change (%s): the new data's "
                   "sample stream starts at %s (the samples before it in the new order are skipped)",
                   ckpt_dir, "; ".join(diffs), where)
    return tuple(diffs)


def check_dataset_contents(run_cfg: RunConfig) -> None:
    """Every start: a dataset whose preprocessing recorded its content (``<prefix>.tokenizer.json``'s
    ``content``) must still hold it; a ``.bin`` of other content beside an ``.idx`` of the same shape would
    train on other tokens without a word. Datasets without the field (other tools, older versions) pass."""
    from megatron_crossbert.data.indexed.reader import CorruptDatasetError
    from megatron_crossbert.data.tokenizers.fingerprint import read_dataset_record, record_path

    for prefix, entry in zip((p for p, _, _ in _datasets(run_cfg)), run_blend(run_cfg)):
        record = read_dataset_record(prefix) or {}
        if "content" in record and record["content"] != entry["fingerprint"]:
            raise CorruptDatasetError(f"{prefix}.bin: its content ({entry['fingerprint']}) is not what "
                                      f"preprocessing wrote ({record['content']}, recorded in {record_path(prefix)}): "
                                      "the .bin and .idx are not the pair it made; preprocess the data again")
