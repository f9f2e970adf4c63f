"""Steps of the full-disk scenario that ``cli_cases.py`` runs as cases (``main(argv) -> status``).

``fill DIR SLACK`` fills DIR's filesystem up to SLACK free bytes; ``copy SRC DST`` copies a tree;
``list DIR...`` prints each tree's files and its 'latest' as JSON; ``entries DIR`` every path under DIR; ``ranks N ARGV...`` runs
``crossbert-pretrain ARGV`` as N forked gloo ranks (DP=N) and prints each rank's exit status and
stderr as JSON. Used inside a private tmpfs mount (``tests/checkpoint/test_disk_full.py``), which vanishes
with its namespace, so everything the test checks must be printed here. ``run_in_tmpfs`` mounts that tmpfs
(``tests/checkpoint/test_disk_full.py``, ``tests/cli/test_disk_full_outputs.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def fill(directory: Path, slack: int) -> None:
    """Leave ``slack`` bytes free (a previous filler is replaced, so each step starts alike)."""
    (directory / "filler").unlink(missing_ok=True)
    stat = os.statvfs(directory)
    with open(directory / "filler", "wb") as handle:
        handle.write(b"\0" * max(0, stat.f_bavail * stat.f_frsize - slack))


def listing(roots: list[str]) -> dict:
    out = {}
    for root in map(Path, roots):
        latest = root / "latest"
        out[str(root)] = {"files": sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()),
                          "latest": latest.read_text() if latest.is_file() else None}
    return out


def _rank(rank: int, world: int, port: int, argv: list[str], err_path: str) -> None:
    os.dup2(os.open(err_path, os.O_WRONLY), 2)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    rc = 1
    try:
        from megatron_crossbert.cli.pretrain import main

        rc = main(argv)
    finally:
        sys.stderr.flush()
        os._exit(rc)


def ranks(world: int, argv: list[str]) -> dict:
    from megatron_crossbert.platform.distributed import free_port

    port, tmp = free_port(), tempfile.mkdtemp()
    pids = []
    for rank in range(world):
        err = os.path.join(tmp, f"err{rank}")
        open(err, "w").close()
        pid = os.fork()
        if pid == 0:
            _rank(rank, world, port, argv, err)
        pids.append((pid, err))
    out = {"rc": [], "stderr": []}
    for pid, err in pids:
        out["rc"].append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        out["stderr"].append(Path(err).read_text())
    shutil.rmtree(tmp)
    return out


def entries(root: Path) -> list[str]:
    """Every path under ``root`` (hidden ones, empty directories), the fill file excepted."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name != "filler")


def run_in_tmpfs(script: str, mnt: Path, size: str, timeout: int):
    """Run ``sh -c script`` in a throwaway mount namespace with a tmpfs of ``size`` at ``mnt`` (``unshare -m``
    as root, ``-rm`` otherwise); skips the calling test, with the reason, where no tmpfs can be mounted."""
    import pytest

    from tests.support.cli_cases import cases_env

    if not shutil.which("unshare"):
        pytest.skip("no unshare(1): cannot mount a private tmpfs")
    mnt.mkdir()
    flags = "-m" if os.geteuid() == 0 else "-rm"
    proc = subprocess.run(["unshare", flags, "--propagation", "private", "sh", "-c",
                           f'mount -t tmpfs -o size={size} tmpfs "{mnt}" || exit 97; {script}'],
                          capture_output=True, text=True, timeout=timeout, env=cases_env(), cwd=mnt.parent)
    if proc.returncode == 97 or (proc.returncode != 0 and "unshare:" in proc.stderr):
        pytest.skip(f"cannot mount a tmpfs here (user namespaces or CAP_SYS_ADMIN missing): {proc.stderr.strip()}")
    return proc


def run_cases_in_tmpfs(cases: dict[str, dict], tmp: Path, mnt: Path, size: str) -> dict[str, dict]:
    """Run ``cases`` (name -> ``cli_cases`` case, in order) in one ``cli_cases`` subprocess inside a private tmpfs
    of ``size`` at ``mnt``; their results by name."""
    from tests.support.cli_cases import cases_argv

    (tmp / "cases.json").write_text(json.dumps(list(cases.values())))
    argv = " ".join(f'"{arg}"' for arg in cases_argv(tmp / "cases.json", tmp / "results.json"))
    proc = run_in_tmpfs(f"exec {argv}", mnt, size, 600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(zip(cases, json.loads((tmp / "results.json").read_text())))


def main(argv: list[str]) -> int:
    command, args = argv[0], argv[1:]
    if command == "fill":
        fill(Path(args[0]), int(args[1]))
    elif command == "copy":
        shutil.copytree(args[0], args[1])
    elif command == "list":
        print(json.dumps(listing(args)))
    elif command == "entries":
        print(json.dumps(entries(Path(args[0]))))
    elif command == "ranks":
        print(json.dumps(ranks(int(args[0]), args[1:])))
    return 0
