"""Stage 3: the claims study on one H200, in the stage's time: ``python -m experiments.claims`` at equal FLOPs.

The stage runs the claims study as a command with its time budget: ``--plan h200 --train-seconds S`` on the
device, ``--plan toy --dry-run`` for the CPU dry run (``experiments/claims/timed.py``: calibrate the arms'
speeds, give every arm the same model FLOPs, train, probe in parallel, a further seed while time allows). No
experiment imports another, so the study's plans, stages and statistics stay the claims study's own; this
stage only builds the command line, stops the command inside the budget, and reports the result it wrote.

The command rewrites its result JSON after every step into this stage's partial-result file
(``stage_io.partial_path``), so a stage stopped at its deadline still reports what was measured: the stop
reaches the command as SIGTERM, which lets the running trainer save and starts no further arm.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from .program import DeviceCheckConfig, module_env
from .stage_io import partial_path

STOP_GRACE_S = 5
"""Seconds the study gets to stop its trainer after the SIGTERM, before it is killed."""


def claims_argv(config: DeviceCheckConfig, result_json: Path, time_budget: float) -> list[str]:
    """The claims study's command line for this stage (``python -m experiments.claims --help``)."""
    claims, mteb_lite = config.claims, Path(config.mteb_lite_dir)
    argv = [sys.executable, "-m", "experiments.claims", "--plan", "toy" if config.toy else "h200",
            "--work-dir", str(Path(config.work_dir) / "claims"), "--corpus", config.corpus,
            "--glue-dir", config.glue_dir, "--mteb-lite-dir", str(mteb_lite) if mteb_lite.is_dir() else "none",
            "--train-seconds", str(claims.train_seconds), "--time-budget", str(round(time_budget)),
            "--probe-workers", str(claims.probe_workers), "--result-json", str(result_json)]
    if claims.seeds:
        argv += ["--seeds", *map(str, claims.seeds)]
    if claims.probe_max_train:
        argv += ["--probe-max-train", str(claims.probe_max_train)]
    return argv + (["--dry-run"] if config.toy else [])


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM (the study passes it to the running trainer, which saves), then SIGKILL after the grace."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_claims(config: DeviceCheckConfig) -> dict:
    """Stage 3: the study's command inside the stage budget; ``ok`` if it exited 0 and every arm scored."""
    start, result_json = time.time(), partial_path(Path(config.work_dir), "claims")
    argv = claims_argv(config, result_json, config.budget("claims"))
    print("[claims] $ " + " ".join(argv), flush=True)
    proc = subprocess.Popen(argv, env=module_env(TOKENIZERS_PARALLELISM="false"))
    try:
        code = proc.wait()
    except BaseException:  # the stage's own deadline (``StageOverBudget``): the study saves what it has
        _stop(proc)
        raise
    if not result_json.is_file():
        raise RuntimeError(f"the claims study exited {code} after {time.time() - start:.0f} s without writing "
                           f"{result_json} (see the stage log)")
    result = json.loads(result_json.read_text())
    return {**result, "command": " ".join(argv[1:]), "exit_code": code, "ok": code == 0 and bool(result.get("ok"))}
