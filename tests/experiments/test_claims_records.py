"""A study outlives its work dir through its records (``--records``): what a record holds, and what is refused.

The end-to-end run (a study killed in training, its work dir gone, finished on a fresh one from the records,
training only the runs that were not sealed) is ``test_claims_resume``, which kills the same tiny WSD plan at
every stage. Here: records made with another plan, or data that did not rebuild the same, are refused in one line
naming the file; a record is complete on disk or absent; a config field added since a record was sealed is read
at its default.
"""

from __future__ import annotations

import json
import shutil

import pytest

from experiments.claims.plan import all_runs
from experiments.claims.study import records as rec
from tests.support import REPO_ROOT


def test_records_of_another_plan_or_other_data_are_refused_in_one_line(tmp_path):
    records = tmp_path / "records"
    rec.check_keys(records, {"data": {"vocab_size": 512}, "tokenizer": "xxh3:aa"})
    rec.check_keys(records, {"data": {"vocab_size": 512}, "tokenizer": "xxh3:aa"})  # the same: accepted
    with pytest.raises(ValueError) as err:
        rec.check_keys(records, {"data": {"vocab_size": 1024}, "tokenizer": "xxh3:bb"})
    assert str(records / "keys.json") in str(err.value) and "tokenizer 'xxh3:aa' -> 'xxh3:bb'" in str(err.value)
    assert "data.vocab_size 512 -> 1024" in str(err.value) and "\n" not in str(err.value)  # the fields, named
    rec.seal(records, "bert-s1", {"lr": 0.001}, {2: 6.5}, [], [], {"train": 3.0})
    with pytest.raises(ValueError, match="bert-s1.json: run bert-s1 was made with another configuration"):
        rec.restore(records, "bert-s1", {"lr": 0.002}, tmp_path / "run", tmp_path / "probes")
    assert not (tmp_path / "run").exists()
    restored = rec.restore(records, "bert-s1", {"lr": 0.001}, tmp_path / "run", tmp_path / "probes")
    assert restored["losses"] == {"2": 6.5} and rec.sealed_record(tmp_path / "run")["cpu_seconds"] == {"train": 3.0}


def test_a_record_is_complete_on_disk_or_absent(tmp_path):
    """The run's record is written after its probes are copied: a record never names a probe that is missing."""
    probe = tmp_path / "iter_0000002.json"
    probe.write_text(json.dumps({"glue_average": 50.0}))
    path = rec.seal(tmp_path / "records", "r", {}, {}, [probe], [], {})
    record = json.loads(path.read_text())
    assert all((tmp_path / "records" / "probes" / "r" / name).is_file() for name in record["probes"])


def test_a_config_field_added_since_a_record_was_sealed_is_read_at_its_default(tmp_path):
    """Records outlive code changes that add a config field left at its default; a changed value is refused."""
    from megatron_crossbert.config import RunConfig

    current = json.loads(json.dumps(RunConfig().to_dict(), default=str))
    older = json.loads(json.dumps(current))
    dropped = sorted(older["checkpoint"])[0]
    del older["checkpoint"][dropped]  # the field did not exist when the record was sealed
    records = tmp_path / "records"
    rec.seal(records, "bert-s1", older, {2: 6.5}, [], [], {})
    assert rec.restore(records, "bert-s1", current, tmp_path / "run", tmp_path / "probes") is not None
    changed = json.loads(json.dumps(current))
    changed["training"]["lr"] = 123.0
    with pytest.raises(ValueError, match="training.lr"):
        rec.restore(records, "bert-s1", changed, tmp_path / "run2", tmp_path / "probes2")


def test_committed_records_still_load(tmp_path):
    """A copy of the study's and the sweep's committed records restores under the current code: the study's CPU
    seconds by stage, and the sweep's row cost, which its first records kept under ``cpu_seconds``."""
    from experiments.claims.study.plan import resolve_plan
    from experiments.claims.study.stage_keys import train_key
    from experiments.claims.sweep import run as sweep_run

    committed = REPO_ROOT / "experiments" / "claims" / "records"
    study, sweep = tmp_path / "threshold", tmp_path / "sweep-threshold"
    shutil.copytree(committed / "threshold", study)
    shutil.copytree(committed / "sweep-threshold", sweep)
    plan = resolve_plan("threshold")
    bert = next(run for run in all_runs(plan) if run.name == "bert-s1")
    sealed = json.loads((study / "runs" / "bert-s1.json").read_text())
    restored = rec.restore(study, "bert-s1", train_key(plan, bert), tmp_path / "run", tmp_path / "probes")
    assert restored[rec.CPU_FIELD] == sealed["cpu_seconds"] and sorted(p.name for p in (tmp_path / "probes").iterdir())
    rows = sweep_run.load_sweep("threshold")
    runs = sweep_run.sweep_runs(resolve_plan(rows.plan), rows)
    out = tmp_path / "sweep-out"
    sweep_run._restore_rows(sweep, runs, out, json.loads((sweep / "keys.json").read_text()))
    costs = sweep_run._costs(out)
    for record in (sweep / "runs").glob("*.json"):
        old = json.loads(record.read_text())["cpu_seconds"]
        assert costs[record.stem] == {"wall_s": old["wall_s"], "cpu_s": old["cpu_s"]}, record.name


def test_a_row_record_keeps_its_cost_under_cost(tmp_path):
    """A sweep's or an ablation's row records its wall and CPU seconds as ``cost``; a study run its CPU seconds by
    stage as ``cpu_seconds``."""
    row = json.loads(rec.seal(tmp_path, "row", {}, {}, [], [], cost={"wall_s": 2.0, "cpu_s": 1.0}).read_text())
    run = json.loads(rec.seal(tmp_path, "run", {}, {}, [], [], {"train": 3.0}).read_text())
    assert row["cost"] == {"wall_s": 2.0, "cpu_s": 1.0} and "cpu_seconds" not in row and rec.cost(row) == row["cost"]
    assert run["cpu_seconds"] == {"train": 3.0} and "cost" not in run and rec.cost(run) == {}


def test_working_sessions_are_counted_by_boot_and_by_pauses_on_a_kept_machine():
    def entry(start: str, updated: str, boot: str = "b1") -> tuple[str, dict]:
        return f"2026-12-07T{start}Z vm 1", {"boot": boot, "updated_utc": f"2026-12-07T{updated}Z", "cpu_seconds": 1.0}

    one = dict([entry("00:00:00", "02:00:00"), entry("01:00:00", "01:00:05")])  # a trainer reports once, at its start
    assert rec.count_sessions(one) == 1
    kept = {**one, **dict([entry("02:45:00", "03:00:00")])}  # the same boot, after a 45-minute pause
    assert rec.count_sessions(kept) == 2 and rec.count_sessions(dict([entry("02:10:00", "02:20:00")]) | one) == 1
    assert rec.count_sessions(one | dict([entry("02:05:00", "02:06:00", boot="b2")])) == 2  # a new machine
    assert rec.count_sessions({}) == 0


def test_labelled_sessions_are_counted_by_label_and_a_short_pause_no_longer_merges_them(tmp_path):
    """Two sessions on a kept machine with a 6-minute pause between them: the pause alone reads as one session,
    their labels (``--session``) as two; unlabelled entries are still inferred beside the labelled ones."""
    rec.note_session(tmp_path, 0.0, 5.0, "session-3")
    rec.note_session(tmp_path, 60.0, 1.0)
    sessions = json.loads((tmp_path / rec.SESSIONS_FILE).read_text())
    assert sorted(entry.get("session") or "" for entry in sessions.values()) == ["", "session-3"]

    def entry(start: str, updated: str, label: str | None) -> tuple[str, dict]:
        return f"2026-12-07T{start}Z vm {start}", {"boot": "b1", "updated_utc": f"2026-12-07T{updated}Z",
                                                   "cpu_seconds": 1.0, **({"session": label} if label else {})}

    unlabelled = dict([entry("06:11:00", "09:10:00", None), entry("09:16:00", "12:00:00", None)])
    assert rec.count_sessions(unlabelled) == 1  # what the pause alone says
    labelled = dict([entry("06:11:00", "09:10:00", "3"), entry("07:00:00", "08:00:00", "3"),
                     entry("09:16:00", "12:00:00", "4")])
    assert rec.count_sessions(labelled) == 2
    assert rec.count_sessions(labelled | dict([entry("20:00:00", "21:00:00", None)])) == 3
