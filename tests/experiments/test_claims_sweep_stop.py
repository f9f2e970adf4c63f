"""A sweep stopped by a signal while a row trains keeps that row unsealed: the row saved and returned on the
signal, so it is not complete, and the sweep ends there instead of going on to the next row."""

from __future__ import annotations

import pytest

from experiments.claims.study import records as rec
from experiments.claims.study.stopping import StudyStopped
from experiments.claims.sweep import run as sweep_run


def test_a_row_stopped_by_a_signal_is_not_sealed_and_the_sweep_stops(tmp_path, monkeypatch):
    sweep = sweep_run.Sweep(name="s", plan="smoke", tokens=4096, rows=[sweep_run.Row("a", "bert"),
                                                                       sweep_run.Row("b", "bert")])
    trained = []
    monkeypatch.setattr(sweep_run, "unigram_entropy", lambda prefix, tok: {"nats": 6.0})
    monkeypatch.setattr(rec, "data_identity", lambda tok, prefix: {"tokenizer": "t", "dataset": "d"})
    monkeypatch.setattr(sweep_run, "run_train_stage", lambda plan, runs, *args: trained.append(runs[0].name))
    monkeypatch.setattr(sweep_run, "stop_requested",
                        lambda: StudyStopped(15) if trained and trained[-1] == "a" else None)
    records = tmp_path / "records"
    with pytest.raises(StudyStopped):
        sweep_run.run_sweep(sweep, tmp_path, tmp_path / "out", None, records)
    assert trained[-1] == "a" and "b" not in trained
    assert not rec.is_sealed(records, "a")
