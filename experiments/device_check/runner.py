"""The device-side driver: run the requested stages, each in its own process under its budget.

A stage process that fails, crashes (a CUDA fault takes the whole process) or overruns its budget
(it stops itself just inside it; past it, its process group is killed) is recorded with its error and the log's tail, and the next stage
still runs. After every stage the JSON and markdown under ``out_dir`` are rewritten, so a call
killed at its limit still returns what finished. ``out_dir`` gets at most five files (the device
returns eight): ``device_check.json``, ``device_check.md`` and one ``<stage>.log`` per stage.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

from megatron_crossbert.benchmarking.report import write_json

from .program import KILL_GRACE_S, DeviceCheckConfig, module_env, stage
from .report import device_check_markdown
from .stage_io import partial_path, read_partial, tail_lines, write_stage_config

TE_NOTE = ("FP8 through Transformer Engine is NOT measured on the device: its cu13 core wheel (276.5 MB) is over "
           "the 64 MiB a call may carry and transformer-engine-torch is source-only, so TE cannot travel.")


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else f"cpu ({platform.processor() or 'x86'})"


def run_meta(config: DeviceCheckConfig) -> dict:
    import torch

    return {"command": config.command or " ".join(sys.argv), "toy": config.toy, "stages": config.stages,
            "device": _device_name(), "torch": torch.__version__, "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "transformer_engine": TE_NOTE}


def _log_tail(path: Path, lines: int = 40) -> str:
    return tail_lines(path.read_text(errors="replace"), lines) if path.is_file() else ""


def exited(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait up to ``timeout`` for the stage to exit, leaving it unreaped: its pid, and so its process group's id,
    stays taken until ``end_group`` has run, so that kill can only reach the stage's own processes."""
    deadline = time.monotonic() + timeout
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _stop(proc: subprocess.Popen) -> None:
    """End the stage's whole process group (it started it: training and probe children included): SIGTERM, then
    SIGKILL ``KILL_GRACE_S`` later (a process inside a C call only dies of the SIGKILL)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        os.killpg(proc.pid, sig)
        if exited(proc, KILL_GRACE_S):
            return


def end_group(proc: subprocess.Popen) -> None:
    """Kill whatever the stage left running in its process group (a test child its stop did not reach), so
    nothing of one stage runs on the GPU while the next one measures; then reap the stage."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:  # stuck in the kernel: its record says killed, the next stage runs
        pass


def stage_record(name: str, code: int | None, seconds: float, budget: float, work_dir: Path) -> dict:
    """The driver's record of a stage that wrote no result: why, and every row it kept before it ended."""
    if code is not None and code < 0 and seconds >= budget:
        record = {"stage": name, "ok": False, "error": f"killed at its budget of {budget:.0f} s"}
    elif code is not None and code < 0:
        record = {"stage": name, "ok": False, "error": f"killed by signal {-code} after {seconds:.0f} s"}
    else:
        record = {"stage": name, "ok": False, "error": f"exit code {code} without a result (see {name}.log)"}
    partial = read_partial(work_dir, name)
    if partial is not None:
        record["result"] = partial
    return record


def run_stage(name: str, config: DeviceCheckConfig, config_path: Path) -> dict:
    """One stage in a fresh process group, told its budget (it stops itself inside it) and killed at it as the
    backstop; its output goes straight into ``<stage>.log`` under ``out_dir`` as it is printed, so a stage killed
    at its budget still leaves its log, and its kept rows (``stage_io.keep_row``) stay in its record. Returns
    its record."""
    budget = config.budget(name)
    log, result = Path(config.out_dir) / f"{name}.log", Path(config.work_dir) / f"stage-{name}.json"
    result.unlink(missing_ok=True)
    partial_path(Path(config.work_dir), name).unlink(missing_ok=True)
    argv = [sys.executable, "-m", f"{__package__}.stage_process", name, str(config_path), str(result), str(budget)]
    start = time.time()
    with log.open("w") as handle:
        proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True, env=module_env())
        try:
            if not exited(proc, budget):
                _stop(proc)
        finally:
            end_group(proc)
    seconds = round(time.time() - start, 1)
    if result.is_file():
        record = json.loads(result.read_text())
    else:
        record = stage_record(name, proc.returncode, seconds, budget, Path(config.work_dir))
    record.update(budget_s=budget, wall_s=seconds)
    if not record["ok"]:
        record["log_tail"] = _log_tail(log)
    return record


def run_device_check(config: DeviceCheckConfig) -> dict:
    """Run ``config.stages`` in order; writes and returns the payload (meta plus one record per stage)."""
    out, work = Path(config.out_dir), Path(config.work_dir)
    if (out / "device_check.json").exists():
        raise FileExistsError(f"{out / 'device_check.json'}: results of an earlier run; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    config_path = write_stage_config(config, work / "device_check_config.json")
    payload = {"meta": run_meta(config), "stages": {}}
    print(f"device check: {payload['meta']['device']}; stages {config.stages}\n{TE_NOTE}", flush=True)
    for name in config.stages:
        print(f"\n== stage {name} (budget {config.budget(name):.0f} s): {stage(name).summary}", flush=True)
        record = run_stage(name, config, config_path)
        payload["stages"][name] = record
        print(f"== stage {name}: {'ok' if record['ok'] else 'FAILED'} in {record['wall_s']} s"
              + (f": {record.get('error', '')}\n{record.get('log_tail', '')}" if not record["ok"] else ""), flush=True)
        write_outputs(payload, out)
    payload["meta"]["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write_outputs(payload, out)
    print("\n" + device_check_markdown(payload), flush=True)
    return payload


def write_outputs(payload: dict, out: Path) -> None:
    write_json(out / "device_check.json", payload)
    (out / "device_check.md").write_text(device_check_markdown(payload) + "\n")
