"""Run many CLI invocations for the price of one interpreter start (imports ~10 s on 2 cores).

``python -m tests.support.cli_cases CASES.json RESULTS.json`` (``cases_argv``, in ``cases_env``) imports
torch, megatron and every CLI module
once, then forks one child per case. Each child is a real process exit: its stdout and stderr are
file descriptors 1/2 redirected to files, an uncaught exception prints Python's own traceback
there (as a console script would), and its exit status is the CLI's. A case is
``{"module": "megatron_crossbert.cli.pretrain", "argv": [...], "env": {...}}``; a result is
``{"rc": int, "stdout": str, "stderr": str}``.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

from tests.support import REPO_ROOT


def _child(case: dict, out_path: str, err_path: str) -> None:
    out_fd, err_fd = os.open(out_path, os.O_WRONLY), os.open(err_path, os.O_WRONLY)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    os.environ.update(case.get("env", {}))
    rc = 1
    try:
        rc = importlib.import_module(case["module"]).main(case["argv"])
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # what the interpreter prints for an uncaught exception
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)


def run_case(case: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out_path, err_path = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        open(out_path, "w").close()
        open(err_path, "w").close()
        pid = os.fork()
        if pid == 0:
            _child(case, out_path, err_path)
        _, status = os.waitpid(pid, 0)
        with open(out_path) as out, open(err_path) as err:
            return {"rc": os.waitstatus_to_exitcode(status), "stdout": out.read(), "stderr": err.read()}


def cases_argv(cases: str | os.PathLike, results: str | os.PathLike) -> list[str]:
    """The command that runs the cases in ``cases`` (JSON) and writes their results to ``results``."""
    return [sys.executable, "-m", "tests.support.cli_cases", str(cases), str(results)]


def cases_env() -> dict[str, str]:
    """This process's environment without a process group's variables, the repository on ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    return env


def run_cases(cases: list[dict], tmp: Path, env: dict[str, str] | None = None) -> list[dict]:
    """Run ``cases`` in one such subprocess (its files in ``tmp``); their results, in order."""
    (tmp / "cases.json").write_text(json.dumps(cases))
    subprocess.run(cases_argv(tmp / "cases.json", tmp / "results.json"), check=True, cwd=tmp,
                   env=cases_env() | (env or {}), timeout=600)
    return json.loads((tmp / "results.json").read_text())


def error_lines(result: dict) -> list[str]:
    """The ``error:`` lines a case printed on stderr."""
    return [line for line in result["stderr"].splitlines() if line.startswith("error: ")]


def main() -> None:
    cases = json.loads(open(sys.argv[1]).read())
    for module in {case["module"] for case in cases}:
        importlib.import_module(module)
    import megatron.core  # noqa: F401  (pay for the heavy imports once, before forking)
    import torch.distributed.checkpoint  # noqa: F401

    with open(sys.argv[2], "w") as handle:
        json.dump([run_case(case) for case in cases], handle)


if __name__ == "__main__":
    main()
