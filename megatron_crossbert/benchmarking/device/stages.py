"""Stages 1 and 2 of the device check, and the entry point each stage process runs.

Stage 1 (``smoke``) runs ``tests/test_gpu.py``, then in this process: the CUDA facts, a one-rank
NCCL all-reduce through the project's own process-group setup, and a few real bf16 training steps
of every architecture (the throughput benchmark's tiny cases, so the step is the one pretraining
runs). Stage 2 (``gpu_check``) is ``crossbert-bench gpu-check``. ``--toy`` runs both on the CPU
(fp32, gloo, tiny shapes). ``python -m megatron_crossbert.benchmarking.device.stages NAME CONFIG
RESULT`` is how the driver starts a stage: the result JSON is written even when the stage fails.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

from megatron_crossbert.benchmarking.device.plan import DeviceCheckConfig, config_from_dict


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def log_tails(folder: Path, since: float, pattern: str = "*.log", lines: int = 20) -> dict[str, str]:
    """The last lines of every log under ``folder`` written since ``since``: the scratch folder
    never comes back from the device, so a failure's evidence must travel in the result JSON."""
    logs = sorted(path for path in folder.rglob(pattern) if path.stat().st_mtime >= since)
    return {str(path.relative_to(folder)): _tail(path.read_text(errors="replace"), lines) for path in logs}


def run_gpu_tests(repo: Path) -> dict:
    """``pytest tests/test_gpu.py``: its exit code and summary (all skip without CUDA)."""
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_gpu.py"]
    done = subprocess.run(argv, cwd=repo, capture_output=True, text=True)
    print(done.stdout + done.stderr, flush=True)
    return {"command": " ".join(argv[1:]), "exit_code": done.returncode, "passed": done.returncode == 0,
            "summary": _tail(done.stdout, 1), "tail": _tail(done.stdout + done.stderr)}


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

    from megatron_crossbert.platform import device

    value = torch.full((4,), 2.0, device=device())
    dist.all_reduce(value)
    expected = 2.0 * dist.get_world_size()
    return {"backend": dist.get_backend(), "world_size": dist.get_world_size(),
            "ok": bool(torch.allclose(value.cpu(), torch.full((4,), expected)))}


def smoke_cases(precision: str) -> list:
    """The throughput benchmark's tiny cases; they must cover every registered (architecture, encoder) pair."""
    from megatron_crossbert.arch import REGISTRY
    from megatron_crossbert.benchmarking.cases import default_cases

    cases = default_cases("tiny", precision, "auto")
    missing = {(spec.name, enc) for spec in REGISTRY.values() for enc in spec.encoders}
    missing -= {(case.arch, case.encoder) for case in cases}
    if missing:
        raise RuntimeError(f"the tiny throughput cases miss registered architectures {sorted(missing)}")
    return cases


def train_steps(case, steps: int) -> dict:
    """``steps`` real optimizer steps of one case; every loss must be finite."""
    from megatron_crossbert.benchmarking.batches import make_batches
    from megatron_crossbert.benchmarking.step import build_runner
    from megatron_crossbert.platform import device

    runner = build_runner(case, device())
    batches = make_batches(case, steps, device(), seed=0)
    losses = [float(runner.step(batch)) for batch in batches]
    return {"name": case.name, "arch": case.arch, "encoder": case.encoder, "precision": case.run_cfg.training.precision,
            "losses": losses, "ok": all(math.isfinite(loss) for loss in losses)}


def run_smoke(config: DeviceCheckConfig) -> dict:
    """Stage 1; ``ok`` only if the GPU tests pass, the all-reduce is right and every arch trains."""
    from megatron_crossbert.config import ParallelConfig
    from megatron_crossbert.platform import initialize

    result = {"gpu_tests": run_gpu_tests(Path.cwd()), "cuda": cuda_facts(), "train_steps": []}
    initialize(ParallelConfig(), 1234)
    result["collective"] = collective_check()
    precision = "fp32" if config.toy else "bf16"
    for case in smoke_cases(precision):
        try:
            result["train_steps"].append(train_steps(case, 2 if config.toy else 4))
        except Exception as err:  # record and keep going: the next architecture still runs
            result["train_steps"].append({"name": case.name, "arch": case.arch, "encoder": case.encoder, "ok": False,
                                          "error": f"{type(err).__name__}: {err}"})
        print(f"train steps {result['train_steps'][-1]}", flush=True)
    result["ok"] = (result["gpu_tests"]["passed"] and result["collective"]["ok"]
                    and all(step["ok"] for step in result["train_steps"]))
    return result


def gpu_check_argv(config: DeviceCheckConfig, out: Path) -> list[str]:
    """``crossbert-bench gpu-check`` arguments: the H200 defaults, or the toy CPU sizes."""
    argv = ["gpu-check", "--out", str(out)]
    if config.toy:
        argv += ["--sizes", "tiny", "--steps", "1", "--warmup", "1", "--precision", "fp32", "--gemm-size", "256",
                 "--allow-cpu"]
    return argv


def run_gpu_check_stage(config: DeviceCheckConfig) -> dict:
    """Stage 2: the gpu-check CLI in this process; its JSON becomes the stage's result."""
    from megatron_crossbert.cli.bench import main

    out = Path(config.work_dir) / "gpu_check.json"
    argv = gpu_check_argv(config, out)
    code = main(argv)
    payload = json.loads(out.read_text())
    return {"command": "crossbert-bench " + " ".join(argv), "exit_code": code, "ok": code == 0, **payload}


def _stage_functions() -> dict:
    from megatron_crossbert.benchmarking.device.claims import run_claims

    return {"smoke": run_smoke, "gpu_check": run_gpu_check_stage, "claims": run_claims}


def run_stage_process(name: str, config_path: str, result_path: str) -> int:
    """Run one stage and write ``{"ok", "seconds", "result" | "error"}`` to ``result_path``."""
    config = config_from_dict(json.loads(Path(config_path).read_text()))
    Path(config.work_dir).mkdir(parents=True, exist_ok=True)
    start, record = time.time(), {"stage": name}
    try:
        record["result"] = _stage_functions()[name](config)
        record["ok"] = bool(record["result"].get("ok", True))
    except Exception as err:  # the driver reports it; the next stage still runs
        record.update(ok=False, error=f"{type(err).__name__}: {err}", traceback=traceback.format_exc(),
                      logs=log_tails(Path(config.work_dir), start))
        print(record["traceback"], flush=True)
    record["seconds"] = round(time.time() - start, 1)
    Path(result_path).write_text(json.dumps(record, indent=1, default=str))
    return 0 if record["ok"] else 1


def partial_path(work_dir: Path, name: str) -> Path:
    return work_dir / f"stage-{name}.partial.json"


def save_partial(work_dir: Path, name: str, result: dict) -> None:
    """What a long stage has so far: the driver reports it if the stage is killed at its budget."""
    path = partial_path(work_dir, name)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str))
    tmp.replace(path)


def write_stage_config(config: DeviceCheckConfig, path: Path) -> Path:
    path.write_text(json.dumps(asdict(config)))
    return path


if __name__ == "__main__":
    sys.exit(run_stage_process(*sys.argv[1:4]))
