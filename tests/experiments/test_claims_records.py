"""A study outlives its work dir through its records (``--records``): what a record holds, and what is refused.

The end-to-end run (a study killed in training, its work dir gone, finished on a fresh one from the records,
training only the runs that were not sealed) is ``test_claims_resume``, which kills the same tiny WSD plan at
every stage. Here: records made with another plan, or data that did not rebuild the same, are refused in one line
naming the file; a record is complete on disk or absent; a config field added since a record was sealed is read
at its default.
"""

from __future__ import annotations

import json

import pytest

from experiments.claims.study import records as rec


def test_records_of_another_plan_or_other_data_are_refused_in_one_line(tmp_path):
    records = tmp_path / "records"
    rec.check_keys(records, {"data": {"vocab_size": 512}, "tokenizer": "xxh3:aa"})
    rec.check_keys(records, {"data": {"vocab_size": 512}, "tokenizer": "xxh3:aa"})  # the same: accepted
    with pytest.raises(ValueError) as err:
        rec.check_keys(records, {"data": {"vocab_size": 512}, "tokenizer": "xxh3:bb"})
    assert str(records / "keys.json") in str(err.value) and "tokenizer" in str(err.value)
    assert "\n" not in str(err.value)
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
