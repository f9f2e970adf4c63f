"""One stage process: ``python -m experiments.device_check.stage_process NAME CONFIG RESULT [BUDGET_S]``.

The driver (``runner``) starts each stage this way, in its own process group, so a stage that
crashes (a CUDA fault takes the whole process) or overruns its budget cannot take the next one with
it. The stage stops itself ``STOP_MARGIN_S`` before its budget (an alarm raises ``StageOverBudget`` in it),
so it still writes its result JSON (``{"stage", "ok", "seconds", "result" | "error"}``) with whatever partial
result it saved; the driver's kill at the budget is only the backstop. The function is looked up from the
stage's ``StageSpec.entry``, so a new stage needs no change here.
"""

from __future__ import annotations

import importlib
import json
import signal
import sys
import time
import traceback
from pathlib import Path

from .program import config_from_dict, stage
from .stage_io import log_tails, read_partial

STOP_MARGIN_S = 10
"""Seconds before its budget a stage stops itself, to write its result before the driver's kill."""


class StageOverBudget(BaseException):
    """Raised by the alarm inside a stage at its own deadline (a BaseException: stages' ``except Exception``
    blocks that record one case's failure and go on must not swallow it)."""


def stage_function(name: str):
    """The function ``StageSpec.entry`` names, imported only in the process that runs it."""
    module, function = stage(name).entry.split(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), function)


def _on_alarm(signum, frame):
    raise StageOverBudget


def arm_deadline(budget_s: float) -> int:
    """Ask for ``StageOverBudget`` ``STOP_MARGIN_S`` before the budget; returns the alarm's seconds."""
    seconds = max(1, int(budget_s - STOP_MARGIN_S))
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(seconds)
    return seconds


def _over_budget(record: dict, work_dir: Path, name: str, seconds: int) -> None:
    record.update(ok=False, error=f"stopped itself at {seconds} s, inside its budget")
    partial = read_partial(work_dir, name)
    if partial is not None:
        record["result"] = partial
    print(f"stage {name}: {record['error']}", flush=True)


def run_stage_process(name: str, config_path: str, result_path: str, budget_s: str | None = None) -> int:
    """Run one stage within ``budget_s`` (default: its registered budget) and write ``{"ok", "seconds", "result" |
    "error"}`` to ``result_path``."""
    config = config_from_dict(json.loads(Path(config_path).read_text()))
    work = Path(config.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    start, record = time.time(), {"stage": name}
    seconds = arm_deadline(float(budget_s) if budget_s else config.budget(name))
    try:
        record["result"] = stage_function(name)(config)
        record["ok"] = bool(record["result"].get("ok", True))
    except StageOverBudget:
        _over_budget(record, work, name, seconds)
    except Exception as err:  # the driver reports it; the next stage still runs
        record.update(ok=False, error=f"{type(err).__name__}: {err}", traceback=traceback.format_exc(),
                      logs=log_tails(work, start))
        print(record["traceback"], flush=True)
    finally:
        signal.alarm(0)
    record["seconds"] = round(time.time() - start, 1)
    Path(result_path).write_text(json.dumps(record, indent=1, default=str))
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(run_stage_process(*sys.argv[1:5]))
