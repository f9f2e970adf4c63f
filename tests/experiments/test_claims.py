"""The claims study (``python -m experiments.claims``) at its smoke size, and its plan files.

The smoke plan trains BERT and CrossBERT complementary with two seeds each for 2 steps, plus the untrained
reference per seed, and probes them (linear and k-NN) on 40 SST-2 rows, through the real CLIs; the data it
needs is generated in the test (third-party text is never committed).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from experiments.claims.__main__ import main
from tests.support import REPO_ROOT

PLANS = REPO_ROOT / "experiments" / "claims" / "plans"


WORDS = ("the a model token encoder reads visible text while decoder rebuilds masked words from "
         "context and probes measure frozen features on small tasks every step").split()


def _sentence(rng: random.Random, n: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _write_fixtures(root) -> tuple:
    """A JSONL corpus and a GLUE-layout SST-2 task made of random sentences."""
    rng = random.Random(0)
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": " ".join(_sentence(rng) for _ in range(8))}) + "\n"
                              for _ in range(300)))
    sst = root / "glue" / "SST-2"
    sst.mkdir(parents=True)
    for split, rows in (("train", 60), ("dev", 30)):
        lines = ["sentence\tlabel"] + [f"{_sentence(rng)}\t{i % 2}" for i in range(rows)]
        (sst / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return corpus, root / "glue"


@pytest.mark.e2e
def test_the_smoke_plan_runs_every_stage_and_reports_intervals(tmp_path):
    from tests.support.synthetic_eval import write_mteb_lite_fixture

    corpus, glue = _write_fixtures(tmp_path)
    work, results = tmp_path / "work", tmp_path / "docs" / "results.md"
    mteb_lite = write_mteb_lite_fixture(tmp_path / "mteb_lite", pairs=12, per_label=8)
    kept = "<!-- mteb-offline:start -->\nmeasured elsewhere\n<!-- mteb-offline:end -->"
    results.parent.mkdir(parents=True)
    results.write_text(f"# old page\n\n{kept}\n")
    argv = ["--plan", "smoke", "--work-dir", str(work), "--corpus", str(corpus),
            "--glue-dir", str(glue), "--probe-dir", str(tmp_path / "none"), "--results-md", str(results),
            "--figures-dir", str(tmp_path / "docs" / "figures"), "--throughput-json", str(tmp_path / "absent.json"),
            "--mteb-lite-dir", str(mteb_lite)]
    assert main(argv) == 0
    status = json.loads((work / "status.json").read_text())
    assert all(not str(v).startswith("FAILED") for v in status.values()), status
    assert status["cpu_seconds:train:bert-s1"] > 0  # the training child's CPU time is counted
    for seed in (1, 2):
        probe = json.loads((work / "probes" / f"crossbert-compl-s{seed}" / "iter_0000002.json").read_text())
        assert "SST-2" in probe["tasks"] and "ToySTSA" not in probe["tasks"]  # MTEB-lite stays out of the average
        assert probe["tasks"]["SST-2"]["knn"]["k"] == 10 and probe["summary"]["knn_glue_average"] is not None
        assert set(probe["mteb_lite"]["tasks"]) == {"ToySTSA", "ToySTSB", "ToyIntents"}
        assert set(probe["mteb_pooler"]["tasks"]) == {"ToySTSA", "ToySTSB", "ToyIntents"}  # a budget point
        assert probe["mteb_pooler"]["training"]["steps"] > 0 and "spans" in probe["mteb_pooler"]["pairs"]
        readouts = probe["summary"]["readouts"]
        assert readouts["raw"]["glue_average"] is not None and readouts["whitened"]["glue_average"] is not None
        mteb = probe["mteb_lite"]["readouts"]  # the recipe's readout is whitened; raw beside it, from the same features
        assert mteb["primary"] == "whitened" and mteb["average"]["whitened"] == probe["mteb_lite"]["average"]
        assert mteb["average"]["raw"] is not None and set(mteb["tasks"]) == {"ToySTSA", "ToySTSB",
                                                                               "ToyIntents"}
    page = results.read_text()
    assert "GLUE linear, raw" in page and "GLUE linear, whitened" in page and "MTEB (frozen, pooler trained)" in page
    assert "MTEB-lite, raw" in page and "MTEB-lite, whitened" in page and "MTEB-lite raw equal samples" in page
    folders = ", ".join(probe["mteb_lite"]["tasks"])
    assert f"MTEB-lite ({folders}; " in page and "span pairs of the corpus, checked against" in page
    assert "By readout (complementary − BERT): raw" in page
    assert "Equal samples" in page and "crossbert-compl − bert" in page
    assert page.startswith(f"# old page\n\n{kept}\n\n<!-- claims-smoke:start")  # kept bytes; a plan other than cpu has its own section
    assert " ± " in page  # two seeds: every cell has an interval
    assert "Calibration" in page and "GLUE k-NN" in page and "CPU-hours" in page
    assert main(argv) == 0  # a second run finds everything done and only rewrites the report


def test_every_shipped_plan_loads_and_a_bad_plan_is_one_error_naming_the_file_and_key(tmp_path):
    from experiments.claims.plan import all_runs
    from experiments.claims.study.plan import plan_names, resolve_plan

    assert {"smoke", "cpu", "h200", "cluster"} <= set(plan_names())
    for name in plan_names():
        plan = resolve_plan(name)
        assert plan.name == name and all_runs(plan)
    cpu = resolve_plan("cpu")
    assert len(cpu.seeds) >= 3 and len(cpu.sweep_shapes) >= 3 and cpu.probe_max_test is None  # the study's floor
    bad = tmp_path / "mine.yaml"
    bad.write_text((PLANS / "smoke.yaml").read_text().replace("seq_length: 32", "seq_length: long"))
    with pytest.raises(ValueError, match=r"mine.yaml: .*plan.seq_length"):
        resolve_plan(str(bad))
    bad.write_text((PLANS / "smoke.yaml").read_text().replace("[bert, crossbert-compl]", "[bert, crossbert-dual]"))
    with pytest.raises(ValueError, match=r"mine.yaml: plan.main_settings: unknown arm\(s\) \['crossbert-dual'\]"):
        resolve_plan(str(bad))
    bad.write_text((PLANS / "smoke.yaml").read_text() + "sample_stepz: 3\n")
    with pytest.raises(ValueError, match=r"unknown plan key\(s\) \['sample_stepz'\]"):
        resolve_plan(str(bad))


def test_arms_repeat_with_every_seed_at_equal_samples_or_more():
    from experiments.claims.plan import main_runs
    from experiments.claims.study.plan import resolve_plan

    plan = resolve_plan("cpu")
    runs = main_runs(plan)
    assert {r.name for r in runs} >= {f"{arm}-s{seed}" for arm in ("bert", "crossbert-fast") for seed in plan.seeds}
    fast = next(r for r in runs if r.name.startswith("crossbert-fast"))
    assert (fast.mask_ratio, fast.decoder_width, fast.decoder_layers) == (0.75, 0.5, 1)
    assert all(r.train_steps >= plan.sample_steps and r.train_steps % plan.save_interval == 0 for r in runs)


def test_runs_as_a_module_from_the_repository_root():
    done = subprocess.run([sys.executable, "-m", "experiments.claims", "--help"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "--plan" in done.stdout and "smoke" in done.stdout, done.stderr[-2000:]


def test_main_runs_are_probed_at_the_budget_points_and_every_probe_every_steps(tmp_path):
    """With ``probe_every`` a curve point costs a probe only on its grid; the budget points the tables read
    (sample budget, the FLOPs point, the sweep step) are always probed, first."""
    import dataclasses

    from experiments.claims.plan import main_runs, reference_runs
    from experiments.claims.study.plan import resolve_plan
    from experiments.claims.study.probe_stage import key_iterations, targets

    plan = dataclasses.replace(resolve_plan("cpu"), probe_every=400)
    fast = next(run for run in main_runs(plan) if run.name == "crossbert-fast-s1")
    root = tmp_path / "runs" / fast.name
    for it in range(200, 1201, 200):
        (root / f"iter_{it:07d}").mkdir(parents=True)
        (root / f"iter_{it:07d}" / "run_config.json").write_text("{}")
    (root / "latest").write_text("iter_0001200")
    keys = key_iterations(plan, fast)
    assert sorted(keys) == [600, 800, 1200]  # sweep step, BERT's FLOPs, the sample budget
    assert [it for it, _ in targets(tmp_path, fast, plan)] == [*sorted(keys), 400]
    everything = dataclasses.replace(plan, probe_every=None)
    assert [it for it, _ in targets(tmp_path, fast, everything)] == [600, 800, 1200, 200, 400, 1000]
    assert key_iterations(plan, reference_runs(plan)[0]) == [1]
