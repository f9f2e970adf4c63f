"""The sample-efficiency experiment (``python -m experiments.sample_efficiency``) at its smoke size.

The smoke plan trains one tiny model for 2 steps and probes it on 40 SST-2 rows, through the real
CLIs; the data it needs is generated in the test (third-party text is never committed).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from experiments.sample_efficiency.__main__ import main
from tests.support import REPO_ROOT


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
def test_sample_efficiency_smoke_plan(tmp_path):
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
    probe = json.loads((work / "probes" / "crossbert-compl" / "iter_0000002.json").read_text())
    assert "SST-2" in probe["tasks"] and "ToySTSA" not in probe["tasks"]  # MTEB-lite stays out of the probe average
    assert set(probe["mteb_lite"]["tasks"]) == {"ToySTSA", "ToySTSB", "ToyIntents"}
    assert probe["mteb_lite"]["average"] == pytest.approx(sum(probe["mteb_lite"]["tasks"].values()) / 3)
    page = results.read_text()
    assert "Sample efficiency" in page and "MTEB-lite avg" in page and page.rstrip().endswith(kept)
    assert main(argv) == 0  # a second run finds everything done and only rewrites the report


def test_runs_as_a_module_from_the_repository_root():
    done = subprocess.run([sys.executable, "-m", "experiments.sample_efficiency", "--help"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "--plan" in done.stdout and "smoke" in done.stdout, done.stderr[-2000:]
