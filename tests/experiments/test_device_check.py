"""The GPU validation script (scripts/device_check.sh) before any GPU is spent on it.

Cheapest first: the device program's arithmetic and the prepare side (wheel pins, data copy, the
64 MiB size guard, the printed device calls) on a throw-away git repo; then a stage that overruns
its budget is killed while the next stage still runs; then the whole ``run --toy`` dry run (every
stage at toy size on the CPU, through the shell script) and the results renderer on its JSON.
All data is generated here (third-party text is never committed).
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.device_check import carry, program
from experiments.device_check.cli import main
from megatron_crossbert.arch import REGISTRY
from megatron_crossbert.benchmarking.cases import SETTINGS
from megatron_crossbert.benchmarking.gpu_check import GPU_CHECK_ROWS
from tests.support import REPO_ROOT

WORDS = ("the a model token encoder reads visible text while decoder rebuilds masked words from context "
         "and probes measure frozen features on small tasks every step good bad film plot").split()


def _sentence(rng: random.Random, n: int = 10) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def write_shared_data(root: Path, tasks: tuple[str, ...] = program.GLUE_TASKS) -> Path:
    """A shared-data layout: two gzipped JSONL corpus sources, GLUE ``tasks`` (random text) and MTEB-lite
    folders (``synthetic_eval.write_mteb_lite_fixture``)."""
    from tests.support.synthetic_eval import write_mteb_lite_fixture

    write_mteb_lite_fixture(root / "mteb_lite", pairs=16, per_label=8)
    rng = random.Random(0)
    (root / "corpus").mkdir(parents=True)
    for source in ("alpha", "beta"):
        with gzip.open(root / "corpus" / f"{source}.jsonl.gz", "wt") as handle:
            for _ in range(200):
                handle.write(json.dumps({"text": " ".join(_sentence(rng) for _ in range(6))}) + "\n")
    headers = {"CoLA": None, "SST-2": "sentence\tlabel", "MRPC": "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
               "STS-B": "index\tsentence1\tsentence2\tscore", "RTE": "index\tsentence1\tsentence2\tlabel"}
    rows = {"CoLA": lambda i: f"src\t{i % 2}\t\t{_sentence(rng)}", "SST-2": lambda i: f"{_sentence(rng)}\t{i % 2}",
            "MRPC": lambda i: f"{i % 2}\t{i}\t{i}\t{_sentence(rng)}\t{_sentence(rng)}",
            "STS-B": lambda i: f"{i}\t{_sentence(rng)}\t{_sentence(rng)}\t{i % 6:.1f}",
            "RTE": lambda i: f"{i}\t{_sentence(rng)}\t{_sentence(rng)}\t{'entailment' if i % 2 else 'not_entailment'}"}
    for task in tasks:
        header = headers[task]
        (root / "glue" / task).mkdir(parents=True)
        for split, count in (("train", 40), ("dev", 20)):
            lines = ([header] if header else []) + [rows[task](i) for i in range(count)]
            (root / "glue" / task / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return root


TOY_TASKS = ("SST-2", "STS-B")
"""The dry run probes two tasks (a classification and the regression) to stay within minutes."""


def _git_repo(root: Path, ignore: str = ".device_carry/\n") -> Path:
    root.mkdir()
    shutil.copy(REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
    (root / ".gitignore").write_text(ignore)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def test_device_calls_fit_the_device_limits():
    calls = carry.device_calls()
    assert [stage for call in program.CALLS for stage in call] == list(program.STAGE_NAMES)
    assert program.CALLS == (("smoke", "gpu_check", "attention"), ("memory",), ("claims",))
    assert calls[0]["timeout_s"] <= 7 * 60  # call 1, compiles included
    assert 120 + 90 + calls[0]["timeout_s"] + 30 + 10 + 4 * 60 <= 15 * 60  # failed start, start-up, idle, close
    for call, stages in zip(calls, program.CALLS):
        assert call["carry"] == [program.DEFAULT_CARRY_DIR] and len(call["command"]) <= 2000
        assert call["command"].endswith(f"run --stages {' '.join(stages)} 2>&1")
    with pytest.raises(ValueError, match="unknown stage"):
        program.DeviceCheckConfig(stages=["smoke", "fp8"])


def test_driver_and_script_answer_help():
    done = subprocess.run([sys.executable, "-m", "experiments.device_check", "run", "--help"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0 and "--stages" in done.stdout and "--toy" in done.stdout
    done = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "device_check.sh")], capture_output=True, text=True)
    assert done.returncode == 2 and "Usage" in done.stdout


def test_wheels_are_pinned_for_the_device_interpreter(tmp_path):
    versions = carry.pinned_versions(REPO_ROOT / "pyproject.toml")
    assert set(versions) == set(carry.DEVICE_WHEELS) and versions["megatron-core"].startswith("0.19.")
    assert versions["mteb"] == "2.26.24"  # the eval extra's pin: the protocol checked against MTEB's scores
    argv = carry.pip_download_argv(versions, tmp_path)
    assert argv[argv.index("--python-version") + 1] == "3.12" and "--no-deps" in argv
    assert "manylinux_2_28_x86_64" in argv and f"megatron-core=={versions['megatron-core']}" in argv
    bad = tmp_path / "pyproject.toml"
    bad.write_text((REPO_ROOT / "pyproject.toml").read_text().replace('"megatron-core>=0.19,<0.20"',
                                                                 '"megatron-core>=9"'))
    with pytest.raises(ValueError, match="does not satisfy the pin"):
        carry.pinned_versions(bad)
    bad.write_text((REPO_ROOT / "pyproject.toml").read_text().replace('"mteb==2.26.24"', '"mteb==2.0.0"'))
    with pytest.raises(ValueError, match="mteb 2.26.24 does not satisfy the pin mteb==2.0.0"):
        carry.pinned_versions(bad)


@pytest.mark.slow
def test_mteb_scores_tasks_without_the_polars_runtime(tmp_path):
    """polars travels to the device without its 54 MB binary runtime (carry.py): mteb's path must not need it."""
    from tests.support.synthetic_eval import write_mteb_lite_fixture

    bench = write_mteb_lite_fixture(tmp_path / "bench", pairs=12, per_label=6)
    code = ("import sys; sys.modules['_polars_runtime_32'] = None\n"
            "import numpy as np\n"
            "from megatron_crossbert.evaluation.mteb.in_training import load_mteb_tasks, probe_in_training\n"
            f"tasks = load_mteb_tasks(['mteb:{bench}:ToySTSA,ToyIntents'])\n"
            "print(probe_in_training(lambda t: np.random.default_rng(0).normal(size=(len(t), 8)), tasks))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "mteb/ToyIntents/accuracy" in done.stdout, done.stderr[-3000:]


def test_travel_size_guard(tmp_path):
    (tmp_path / "carry").mkdir()
    (tmp_path / "carry" / "blob").write_bytes(b"x" * 3000)
    assert carry.check_travel_size(tmp_path / "carry", checkout=1000, limit_bytes=4000) == 4000
    with pytest.raises(carry.CarryTooLarge, match="over the device limit"):
        carry.check_travel_size(tmp_path / "carry", checkout=1001, limit_bytes=4000)


def test_prepare_copies_data_prints_calls_and_refuses_past_the_limit(tmp_path, capsys):
    shared, repo = write_shared_data(tmp_path / "shared"), _git_repo(tmp_path / "repo")
    base = ["prepare", "--repo", str(repo), "--shared-data", str(shared), "--no-wheels"]
    assert main(base + ["--limit-mib", "0.01"]) == 2
    assert "over the device limit of 0 MiB" in capsys.readouterr().err
    assert main(base) == 0
    out = capsys.readouterr().out
    assert (repo / ".device_carry" / "data" / "glue" / "RTE" / "dev.tsv").is_file()
    assert (repo / ".device_carry" / "data" / "mteb_lite" / "ToyIntents" / "train.jsonl").is_file()
    assert len(list((repo / ".device_carry" / "data" / "corpus").glob("*.jsonl.gz"))) == 2
    calls = [json.loads(line.split(". ", 1)[1]) for line in out.splitlines() if line[:3] in ("1. ", "2. ", "3. ")]
    assert calls == carry.device_calls() and "travels" in out
    unignored = _git_repo(tmp_path / "unignored", ignore="")
    assert main(["prepare", "--repo", str(unignored), "--shared-data", str(shared), "--no-wheels"]) == 2
    assert "not git-ignored" in capsys.readouterr().err


def test_the_claims_stage_runs_the_claims_study_as_a_command_within_its_budget(tmp_path):
    """No experiment imports another: the stage's command line is one the claims study's own parser takes."""
    from experiments.claims.__main__ import build_parser
    from experiments.device_check.claims import claims_argv

    shared = write_shared_data(tmp_path / "shared", tasks=TOY_TASKS)
    config = program.DeviceCheckConfig(toy=True, work_dir=str(tmp_path / "work"), corpus=str(shared / "corpus"),
                                    glue_dir=str(shared / "glue"), mteb_lite_dir=str(tmp_path / "absent"),
                                    claims=program.ClaimsSettings(seeds=[7], probe_max_train=30))
    argv = claims_argv(config, tmp_path / "result.json", program.stage("claims").budget(config.toy))
    assert argv[1:3] == ["-m", "experiments.claims"]
    args = build_parser().parse_args(argv[3:])
    assert (args.plan, args.dry_run, args.seeds, args.probe_max_train, args.mteb_lite_dir) == ("toy", True, [7], 30, "none")
    assert args.time_budget == program.stage("claims").toy_budget_s and args.work_dir == str(tmp_path / "work" / "claims")


def test_the_device_plan_is_the_claims_studys_h200_plan_at_the_benchmarks_claims_shape():
    from megatron_crossbert.benchmarking.cases import SIZES
    from experiments.claims.study.plan import resolve_plan

    h200, size = resolve_plan("h200"), SIZES["claims"]
    assert (h200.main_shape.hidden_size, h200.main_shape.num_layers, h200.main_shape.num_attention_heads,
            h200.seq_length, h200.vocab_size, h200.micro_batch) == \
        (size["hidden_size"], size["num_layers"], size["num_attention_heads"], size["seq_length"],
         size["vocab_size"], size["micro_batch_size"])  # calibration measures the arms at this shape


def _toy_config(tmp_path: Path, shared: Path, stages: list[str]) -> program.DeviceCheckConfig:
    return program.DeviceCheckConfig(toy=True, stages=stages, out_dir=str(tmp_path / "out"),
                                  work_dir=str(tmp_path / "work"), corpus=str(shared / "corpus"),
                                  glue_dir=str(shared / "glue"), command="test")


@pytest.mark.slow
def test_a_stage_past_its_budget_is_killed_and_the_next_still_runs(tmp_path, monkeypatch):
    from experiments.device_check import runner

    real = program.DeviceCheckConfig.budget
    monkeypatch.setattr(program.DeviceCheckConfig, "budget", lambda self, name: 1 if name == "smoke" else real(self, name))
    config = _toy_config(tmp_path, write_shared_data(tmp_path / "shared"), ["smoke", "gpu_check"])
    payload = runner.run_device_check(config)
    smoke, check = payload["stages"]["smoke"], payload["stages"]["gpu_check"]
    assert not smoke["ok"] and "killed at its budget of 1 s" in smoke["error"]
    assert check["ok"], check
    names = [r["name"] for r in check["result"]["runs"][0]["report"]["results"]]
    assert names == [s.name for s in SETTINGS if s.name in GPU_CHECK_ROWS or s.name in ("bert", "mlm-modern")]
    assert json.loads((tmp_path / "out" / "device_check.json").read_text())["stages"].keys() == {"smoke", "gpu_check"}


@pytest.mark.e2e
def test_toy_dry_run_of_every_stage_and_its_results_section(tmp_path):
    from experiments.device_check.report import SECTION_START, gpu_section, write_gpu_section

    shared, out = write_shared_data(tmp_path / "shared", tasks=TOY_TASKS), tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(out), "OMP_NUM_THREADS": "1"}
    argv = ["bash", str(REPO_ROOT / "scripts" / "device_check.sh"), "run", "--toy",
            "--work-dir", str(tmp_path / "work"), "--corpus", str(shared / "corpus"),
            "--glue-dir", str(shared / "glue"), "--mteb-lite-dir", str(shared / "mteb_lite"),
            "--probe-max-train", "30", "--seeds", "1234"]
    done = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert len(list(out.iterdir())) <= program.OUT_FILE_LIMIT
    payload = json.loads((out / "device_check.json").read_text())
    assert payload["meta"]["toy"] and payload["meta"]["command"].startswith("scripts/device_check.sh run --toy")
    smoke = payload["stages"]["smoke"]["result"]
    assert {(step["arch"], step["encoder"]) for step in smoke["train_steps"]} == {
        (spec.name, encoder) for spec in REGISTRY.values() for encoder in spec.encoders}
    assert smoke["collective"] == {"backend": "gloo", "world_size": 1, "ok": True}
    check = payload["stages"]["gpu_check"]["result"]["runs"][0]["report"]["results"]
    assert all(r["predicted_samples_per_s_vs_ref"] > 0 and r["measured_over_predicted"] > 0 for r in check)
    assert {r["reference"] for r in check} == {"bert", "mlm-modern"} and check[1]["samples_per_s_vs_dense"] == 1.0
    attention = payload["stages"]["attention"]["result"]
    assert [(row["mask"], row["seq_length"]) for row in attention["kernels"]] == [
        ("documents", 256), ("documents+window", 256), ("documents", 64)]  # the last at BERT-base's shape, toy
    assert all(row["ok"] and row["documents"] > 1 and row["output_rel_err"] < 1e-5 for row in attention["kernels"])
    assert [run["attention_backend"] for run in attention["mfu"]] == ["sdpa", "megatron"]
    memory = payload["stages"]["memory"]["result"]
    assert memory["ok"] and "| tiny bert |" in memory["markdown"]
    claims = payload["stages"]["claims"]["result"]
    arms = claims["seeds"][0]["arms"]
    assert [arm["arm"] for arm in arms] == ["bert", "crossbert-single", "crossbert-compl", "crossbert-fast",
                                            "init-reference"]
    trained = [arm["model_flops"] for arm in arms[:4]]
    assert max(trained) / min(trained) < 1.5  # equal FLOPs up to one step's rounding at toy size
    assert all(set(arm["scores"]["tasks"]) == set(TOY_TASKS) for arm in arms)
    assert all(set(arm["scores"]["mteb_lite"]) == {"ToySTSA", "ToySTSB", "ToyIntents"} for arm in arms)
    assert all(-100 <= arm["scores"]["mteb_lite_average"] <= 100 for arm in arms)
    assert "MTEB-lite avg: mteb's main score over ToyIntents, ToySTSA, ToySTSB (" in claims["markdown"]
    section = gpu_section([payload])
    assert "| GLUE avg | MTEB-lite avg | status |" in section
    assert section.startswith(SECTION_START) and payload["meta"]["started_utc"] in section
    assert payload["meta"]["command"] in section and "| crossbert-compl |" in section
    assert "× sparse MLM FLOP-predicted" in section and "FP8 through Transformer Engine is NOT measured" in section
    assert "| documents+window | 256 |" in section and "| megatron | crossbert-modern r=0.5 compl |" in section
    results = tmp_path / "results.md"
    results.write_text("# Results\n\nCPU numbers.\n")
    with pytest.raises(ValueError, match="refusing to write CPU dry-run"):
        write_gpu_section(results, [payload])
    as_gpu = copy.deepcopy(payload)
    as_gpu["meta"]["toy"] = False  # only to exercise the marker replacement below
    write_gpu_section(results, [as_gpu])
    write_gpu_section(results, [as_gpu, as_gpu])
    text = results.read_text()
    assert text.startswith("# Results\n\nCPU numbers.") and text.count(SECTION_START) == 1 and "### Call 2" in text


PAUSE_AFTER_WRITES = """
import sys, time
from pathlib import Path
from megatron_crossbert import fsutil

real, partial, writes = fsutil.atomic_write_text, Path(sys.argv[6]), []

def pausing(path, text):  # the stage's real writer; it stops for good after its Nth write of the partial
    real(path, text)
    writes.extend([path] if Path(path) == partial else [])
    if len(writes) == int(sys.argv[5]):
        print("PAUSED", flush=True)
        time.sleep(600)

fsutil.atomic_write_text = pausing
from experiments.device_check import stage_process
sys.exit(stage_process.run_stage_process(*sys.argv[1:5]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("name,writes,sig,key", [("gpu_check", 2, "SIGKILL", "runs"), ("memory", 2, "SIGTERM", "rows")])
def test_a_stage_killed_between_rows_keeps_every_row_before_the_kill(tmp_path, name, writes, sig, key):
    """The toy stage runs for real until it has kept its rows; it is then held and killed from outside."""
    import signal

    from experiments.device_check.report import device_check_markdown
    from experiments.device_check.runner import stage_record
    from experiments.device_check.stage_io import partial_path, write_stage_config

    config = program.DeviceCheckConfig(toy=True, stages=[name], out_dir=str(tmp_path / "out"),
                                    work_dir=str(tmp_path / "work"))
    partial = partial_path(Path(config.work_dir), name)
    argv = [sys.executable, "-c", PAUSE_AFTER_WRITES, name, str(write_stage_config(config, tmp_path / "c.json")),
            str(tmp_path / "result.json"), "300", str(writes), str(partial)]
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=program.module_env(OMP_NUM_THREADS="1"), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    output = []
    for line in proc.stdout:
        if line.startswith("PAUSED"):
            break
        output.append(line)
    kept = json.loads(partial.read_text())
    os.killpg(proc.pid, getattr(signal, sig))
    proc.wait(timeout=30)
    record = stage_record(name, proc.returncode, 1.0, 300, Path(config.work_dir))
    assert record["error"] == f"killed by signal {getattr(signal, sig).value} after 1 s", "".join(output)[-3000:]
    assert record["result"] == kept and kept[key] and not (tmp_path / "result.json").exists()
    body = device_check_markdown({"meta": {"device": "cpu", "toy": True, "started_utc": "now", "torch": "t",
                                           "python": "p", "command": "test", "transformer_engine": "no TE"},
                                  "stages": {name: record}})  # the report renders what the stage kept
    if name == "gpu_check":
        run = record["result"]["runs"][0]
        assert run["partial"] and run["report"]["meta"]["rounds_timed"] == 1
        assert {r["name"] for r in run["report"]["results"]} >= {"bert", "crossbert r=0.5 compl"}
        assert any(line.startswith("[gpu_check] tiny fp32 round 1: bert: ") for line in output)
        assert "| tiny fp32 (stopped after 1 rounds) | crossbert r=0.5 compl |" in body
    else:
        assert any(line.startswith(f"[{name}] {key} ") for line in output)
        assert "| tiny bert |" in body
