"""The ablations' side of their records (``study/records.py`` owns the files): the key a row is sealed under,
what its record holds, and what a restored row brings back into a fresh work dir.

A row is sealed once measured: its JSON is the record's one probe file, a decoder row adds its run's held-out
losses and training commands, and the row's wall and CPU seconds (training included) are its ``cost``. A row's
key is the configuration of the run it reads (the study's run, or its own decoder run) and how it is read, so a
record of another plan or reading is refused; ``keys.json`` holds what every row depends on besides: the probe
settings and data, and the identity of the study's tokenizer and dataset. A restored row's JSON goes back to
``rows/`` (the row counts as measured) and a decoder row's record beside its run (the run counts as trained),
so nothing sealed is trained or measured again.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..study import records as rec
from ..study.data_stage import data_prefix, tokenizer_dir
from ..study.plan import Plan
from ..study.stage_keys import train_key
from ..study.train_stage import run_commands, run_dir, valid_losses
from .rows import Row, row_path

COST_FIELDS = ("wall_s", "cpu_s", "train_cpu_s")
"""The row JSON's fields that make up its record's cost."""


def row_key(plan: Plan, row: Row) -> dict:
    """What the row's numbers depend on besides the shared keys: the config of the run it reads, the reading, the
    step read when the row names one, and the measurement when it is not the probes."""
    step = {} if row.step is None else {"step": row.step}
    measured = {} if row.measure == "probe" else {"measure": row.measure}
    return {**train_key(plan, row.run), "reading": dataclasses.asdict(row.reading.encoding), **step, **measured}


def shared_keys(probe_key: dict, work: Path) -> dict:
    """What every row depends on: the probe settings and data, the study's tokenizer and dataset (by content)."""
    return {"probe": probe_key, **rec.data_identity(tokenizer_dir(work), data_prefix(work))}


def restore_rows(records: Path, plan: Plan, rows: list[Row], out: Path, shared: dict) -> list[str]:
    """Seed ``out`` with every sealed row of ``rows`` (the shared keys checked first); returns their keys."""
    rec.check_keys(records, shared)
    restored = []
    for row in rows:
        if row.same_as is not None:
            continue
        record = rec.restore(records, row.key, row_key(plan, row), run_dir(out, row.run) if row.trained_here else None,
                             out / "rows")
        if record is not None:
            restored.append(row.key)
    if restored:
        print(f"[ablations] {len(restored)} rows restored from {records}: {', '.join(restored)}", flush=True)
    return restored


def seal_row(records: Path, plan: Plan, row: Row, out: Path) -> Path:
    """Seal the measured ``row`` (its JSON on disk) in ``records``; returns the record's path."""
    measured = json.loads(row_path(out, row).read_text())
    losses, commands = (valid_losses(out, row.run), run_commands(out, row.run)) if row.trained_here else ({}, [])
    path = rec.seal(records, row.key, row_key(plan, row), losses, [row_path(out, row)], commands,
                    cost={name: measured[name] for name in COST_FIELDS if name in measured})
    print(f"[ablations] {row.key}: sealed in {path}", flush=True)
    return path
