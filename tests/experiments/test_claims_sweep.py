"""The recipe sweep (``python -m experiments.claims.sweep``) at smoke size: rows train through the study's own
stages from the plan's data, each row's held-out losses are read against the unigram entropy and the untrained
run, the page section names the chosen row, a rerun trains nothing, and a changed row is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.claims.__main__ import main as claims_main
from experiments.claims.study.floors import entropy_nats
from experiments.claims.sweep.run import load_sweep, main
from experiments.claims.sweep.page import chosen
from tests.experiments.test_claims import _write_fixtures

SWEEP = """name: tiny
plan: smoke
tokens: 512
base: {{eval_iters: 1}}
rows:
  - {{name: bert-a, arm: bert}}
  - {{name: bert-wsd, arm: bert, lr_decay_style: WSD, lr: {lr}}}
  - {{name: bert-mask, arm: bert, bert_mask_prob: 0.3}}
  - {{name: compl-a, arm: crossbert-compl, hidden_dropout: 0.0}}
"""


def test_entropy_of_counts_is_the_distributions_entropy_in_nats():
    assert entropy_nats(np.array([1.0, 1.0, 0.0, 2.0])) == pytest.approx(-(2 * 0.25 * np.log(0.25) + 0.5 * np.log(0.5)))
    assert entropy_nats(np.array([0.0, 5.0])) == 0.0


def test_a_row_changing_an_unknown_field_or_with_a_bad_type_is_one_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("plan: smoke\ntokens: 10\nrows:\n  - {name: r, arm: bert, learning_rate: 1}\n")
    with pytest.raises(ValueError, match="bad.yaml: r: 'learning_rate' is not a plan field"):
        load_sweep(str(bad))
    bad.write_text("plan: smoke\ntokens: 10\nrows:\n  - {name: r, arm: bert, lr: fast}\n")
    with pytest.raises(ValueError, match=r"bad.yaml: .*r\.lr"):
        load_sweep(str(bad))


@pytest.mark.e2e
def test_the_sweep_trains_every_row_reports_floors_and_resumes(tmp_path, capsys):
    corpus, glue = _write_fixtures(tmp_path)
    work = tmp_path / "work"
    assert claims_main(["--plan", "smoke", "--work-dir", str(work), "--corpus", str(corpus), "--glue-dir", str(glue),
                        "--probe-dir", str(tmp_path), "--stages", "data", "--mteb-lite-dir", "none"]) == 0
    sweep_file, page = tmp_path / "tiny.yaml", tmp_path / "results.md"
    sweep_file.write_text(SWEEP.format(lr=0.002))
    argv = ["--sweep", str(sweep_file), "--work-dir", str(work), "--results-md", str(page)]
    assert main(argv) == 0
    results = json.loads((work / "sweep" / "tiny" / "results.json").read_text())
    names = [row["name"] for row in results["rows"]]
    assert names == ["untrained-bert", "untrained-crossbert-compl", "bert-a", "bert-wsd", "bert-mask", "compl-a"]
    assert 0 < results["unigram"]["nats"] < results["unigram"]["ln_vocab"]
    for row in results["rows"]:
        assert row["done"] and row["final_loss"] is not None and row["cpu_s"] > 0, row
        assert len(row["losses"]) == (1 if row["untrained"] else 4)  # every quarter of a row's run
    wsd = next(row for row in results["rows"] if row["name"] == "bert-wsd")
    assert wsd["recipe"]["lr_decay_style"] == "WSD" and wsd["steps"] == 4  # 512 tokens / (4 x 32), on the grid
    best = chosen([row for row in results["rows"] if row["arm"] == "bert"])
    assert best["name"] in ("bert-a", "bert-wsd")  # bert-mask's loss is another task: never chosen by loss
    text = page.read_text()
    assert "<!-- recipe-sweep:start" in text and f"{results['unigram']['nats']:.3f} nats" in text
    assert f"**{best['name']}**" in text
    commands = (work / "sweep" / "tiny" / "commands.jsonl").read_text().count("\n")
    assert main(argv) == 0  # resumes: every run finished, nothing trains again
    assert (work / "sweep" / "tiny" / "commands.jsonl").read_text().count("\n") == commands
    sweep_file.write_text(SWEEP.format(lr=0.004))
    capsys.readouterr()
    assert main(argv) == 2  # a changed row in a used sweep dir: one line, nothing retrained
    assert "another plan or other data" in capsys.readouterr().err
    assert (work / "sweep" / "tiny" / "commands.jsonl").read_text().count("\n") == commands
