"""Stages 1 and 2 of the device check: the smoke test and the GPU throughput check.

Stage ``smoke`` runs, in this process: the CUDA facts, a one-rank NCCL all-reduce through the project's own
process-group setup, and a few real bf16 training steps of every architecture (the throughput benchmark's tiny
cases, so the step is the one pretraining runs), then ``tests/benchmarking/test_gpu.py`` of this checkout,
streamed line by line under its own timeout. Stage ``gpu_check`` is the library's ``crossbert-bench gpu-check``
(``benchmarking.gpu_check``). ``--toy`` runs both on the CPU (fp32, gloo, tiny shapes).
``stage_process`` is how the driver starts each of them.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from pathlib import Path

from .program import REPO_ROOT, DeviceCheckConfig
from .stage_io import keep_row, partial_path, save_partial, tail_lines


GPU_TESTS_TIMEOUT_S = 60
"""Seconds ``tests/benchmarking/test_gpu.py`` may take inside the smoke stage (tiny cases: seconds on the H200)."""
TOY_GPU_TESTS_TIMEOUT_S = 240
"""The same in the CPU dry run, where every test skips but pytest's start-up on 2 loaded cores is slow."""


def stream_command(argv: list[str], cwd: Path, timeout_s: float) -> tuple[int | None, str]:
    """Run ``argv`` printing each line as it comes (into the stage's log, which streams to ``$OUT``), killed past
    ``timeout_s`` and whenever this call is left early (the stage's own deadline raises through it): the child
    never outlives it; returns (exit code, None if killed; the whole output)."""
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    lines = []
    try:
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines.append(line)
        proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    killed = proc.returncode is not None and proc.returncode < 0
    return (None if killed else proc.returncode), "".join(lines)


def run_gpu_tests(repo: Path, timeout_s: float = GPU_TESTS_TIMEOUT_S) -> dict:
    """``pytest tests/benchmarking/test_gpu.py``, streamed: its exit code and summary (all skip without CUDA)."""
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/benchmarking/test_gpu.py"]
    code, output = stream_command(argv, repo, timeout_s)
    return {"command": " ".join(argv[1:]), "exit_code": code, "passed": code == 0,
            "summary": tail_lines(output, 1) if code is not None else f"killed after {timeout_s:.0f} s",
            "tail": tail_lines(output)}


def cuda_facts() -> dict:
    import torch

    facts = {"torch": torch.__version__, "cuda_available": torch.cuda.is_available(), "cuda": torch.version.cuda}
    if torch.cuda.is_available():
        facts.update(device=torch.cuda.get_device_name(), capability=list(torch.cuda.get_device_capability()),
                     bf16_supported=torch.cuda.is_bf16_supported(), nccl=".".join(map(str, torch.cuda.nccl.version())))
    return facts


def collective_check() -> dict:
    """All-reduce a tensor over the process group ``platform.initialize`` made (NCCL on GPU, gloo on CPU)."""
    import torch
    import torch.distributed as dist

    from megatron_crossbert.platform.distributed import device

    value = torch.full((4,), 2.0, device=device())
    dist.all_reduce(value)
    expected = 2.0 * dist.get_world_size()
    return {"backend": dist.get_backend(), "world_size": dist.get_world_size(),
            "ok": bool(torch.allclose(value.cpu(), torch.full((4,), expected)))}


def smoke_cases(precision: str) -> list:
    """The throughput benchmark's tiny cases, without document masks (SDPA: the smoke compiles nothing, the
    first compile is gpu_check's, at the shape it measures); they must cover every registered (architecture,
    encoder) pair."""
    from megatron_crossbert.arch import REGISTRY
    from megatron_crossbert.benchmarking.cases import default_cases

    cases = default_cases("tiny", precision, "auto", document_mask=False)
    missing = {(spec.name, enc) for spec in REGISTRY.values() for enc in spec.encoders}
    missing -= {(case.arch, case.encoder) for case in cases}
    if missing:
        raise RuntimeError(f"the tiny throughput cases miss registered architectures {sorted(missing)}")
    return cases


def train_steps(case, steps: int) -> dict:
    """``steps`` real optimizer steps of one case; every loss must be finite."""
    from megatron_crossbert.benchmarking.batches import make_batches
    from megatron_crossbert.benchmarking.step import build_runner
    from megatron_crossbert.platform.distributed import device

    runner = build_runner(case, device())
    batches = make_batches(case, steps, device(), seed=0)
    losses = [float(runner.step(batch)) for batch in batches]
    return {"name": case.name, "arch": case.arch, "encoder": case.encoder, "precision": case.run_cfg.training.precision,
            "losses": losses, "ok": all(math.isfinite(loss) for loss in losses)}


def run_smoke(config: DeviceCheckConfig) -> dict:
    """Stage smoke, cheapest answers first (CUDA facts, the all-reduce, each arch's steps, saved as they come,
    then the GPU tests); ``ok`` only if the GPU tests pass, the all-reduce is right and every arch trains."""
    from megatron_crossbert.config import ParallelConfig
    from megatron_crossbert.platform.distributed import initialize

    work = Path(config.work_dir)
    result = {"cuda": cuda_facts(), "train_steps": []}
    print(f"cuda {result['cuda']}", flush=True)
    initialize(ParallelConfig(), 1234)
    result["collective"] = collective_check()
    print(f"collective {result['collective']}", flush=True)
    save_partial(work, "smoke", result)
    precision = "fp32" if config.toy else "bf16"
    for case in smoke_cases(precision):
        try:
            row = train_steps(case, TOY_TRAIN_STEPS if config.toy else 4)
        except Exception as err:  # record and keep going: the next architecture still runs
            row = {"name": case.name, "arch": case.arch, "encoder": case.encoder, "ok": False,
                   "error": f"{type(err).__name__}: {err}"}
        keep_row(work, "smoke", result, "train_steps", row)
    result["gpu_tests"] = run_gpu_tests(REPO_ROOT, TOY_GPU_TESTS_TIMEOUT_S if config.toy else GPU_TESTS_TIMEOUT_S)
    save_partial(work, "smoke", result)
    result["ok"] = (result["gpu_tests"]["passed"] and result["collective"]["ok"]
                    and all(step["ok"] for step in result["train_steps"]))
    return result


TOY_TRAIN_STEPS = 1
"""Training steps per architecture in the CPU dry run's smoke (the H200 runs 4)."""
TOY_GPU_CHECK = dict(sizes=["tiny"], steps=1, warmup=0, precision="fp32", gemm_size=256, allow_cpu=True)
"""The CPU dry run's gpu-check options (no warm-up round: the dry run checks the code path, not speed)."""
DEVICE_GPU_CHECK = dict(sizes=["base"], steps=6, warmup=2)
"""The H200 run's changes to ``GpuCheckOptions``' defaults: BERT-base only and two rounds fewer each, so the
stage fits its budget in the first call (BERT-large is for a later window)."""


def _flag_words(options: dict) -> list[str]:
    """``{"gemm_size": 256, "allow_cpu": True}`` -> ``["--gemm-size", "256", "--allow-cpu"]``."""
    words = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        words += [flag] if value is True else [flag, *map(str, value if isinstance(value, list) else [value])]
    return words


def compile_s_per_shape(report: dict, cases: list) -> float | None:
    """Seconds one compiled flex shape cost in this run: the first warm-up round's time beyond a timed step,
    over the distinct shapes the run's models compile (``flex_compile``); None where nothing was compiled or
    no warm-up ran. The device program's per-compile constant is set from it (``budget``)."""
    from megatron_crossbert.models.flex_compile import union_flex_shapes

    shapes, seconds = len(union_flex_shapes(case.run_cfg for case in cases)), report["meta"].get("compile_s")
    return round(seconds / shapes, 1) if shapes and seconds else None


def run_gpu_check_stage(config: DeviceCheckConfig) -> dict:
    """Stage gpu_check: the library's gpu check in this process. It writes its JSON (this stage's partial
    result) after every timed round; the stage's result is that same file, with the measured compile time."""
    from megatron_crossbert.benchmarking.gpu_check import GpuCheckOptions, run_gpu_check
    from megatron_crossbert.benchmarking.throughput import ThroughputOptions, select_cases

    changes = {"out": str(partial_path(Path(config.work_dir), "gpu_check")),
               **(TOY_GPU_CHECK if config.toy else DEVICE_GPU_CHECK)}
    options = GpuCheckOptions(**changes)
    code = run_gpu_check(options)
    payload = json.loads(Path(options.out).read_text())
    cases = select_cases(ThroughputOptions(size=options.sizes[0], precision=options.precision, only=options.only))
    runs = [run for run in payload.get("runs", []) if "report" in run]
    measured = compile_s_per_shape(runs[0]["report"], cases) if runs else None
    return {"command": "crossbert-bench gpu-check " + " ".join(_flag_words(changes)), "exit_code": code,
            "ok": code == 0, "compile_s_per_shape": measured, **payload}
