"""The entry point of one stage process: ``python -m experiments.device_check.stage_process NAME CONFIG RESULT``.

The driver (``runner``) starts each stage this way, in its own process group, so a stage that
crashes (a CUDA fault takes the whole process) or overruns its budget cannot take the next one with
it. The result JSON (``{"stage", "ok", "seconds", "result" | "error"}``) is written even when the
stage fails.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

from .attention_stage import run_attention
from .claims import run_claims
from .memory_stage import run_memory
from .plan import config_from_dict
from .stage_io import log_tails
from .stages import run_gpu_check_stage, run_smoke

STAGE_FUNCTIONS = {"smoke": run_smoke, "gpu_check": run_gpu_check_stage, "attention": run_attention,
                   "claims": run_claims, "memory": run_memory}
"""Each stage of ``plan.STAGES`` and the function that runs it."""


def run_stage_process(name: str, config_path: str, result_path: str) -> int:
    """Run one stage and write ``{"ok", "seconds", "result" | "error"}`` to ``result_path``."""
    config = config_from_dict(json.loads(Path(config_path).read_text()))
    Path(config.work_dir).mkdir(parents=True, exist_ok=True)
    start, record = time.time(), {"stage": name}
    try:
        record["result"] = STAGE_FUNCTIONS[name](config)
        record["ok"] = bool(record["result"].get("ok", True))
    except Exception as err:  # the driver reports it; the next stage still runs
        record.update(ok=False, error=f"{type(err).__name__}: {err}", traceback=traceback.format_exc(),
                      logs=log_tails(Path(config.work_dir), start))
        print(record["traceback"], flush=True)
    record["seconds"] = round(time.time() - start, 1)
    Path(result_path).write_text(json.dumps(record, indent=1, default=str))
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(run_stage_process(*sys.argv[1:4]))
