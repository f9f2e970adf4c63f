"""Prepare, on the CPU machine, the folder that travels to the device, and print the device calls.

The device has torch and most of the stack but no network and no megatron-core or nltk (nor
nltk's own dependency defusedxml), and none of mteb's stack (mteb, datasets, pydantic, ...), so those
travel as cp312 manylinux x86_64 wheels, at the versions this machine's tests ran with (each checked
against pyproject's requirement, the eval extra's mteb pin included). A new runtime dependency joins
prepare's wheels: xxhash (checkpoint checksums) and accelerate (sentence-transformers' trainer, from the
eval extra's ``sentence-transformers[train]``; 0.4 MB) are in the device's image too, but travel at the
version the tests here ran with; sacremoses (the eval extra's Moses tokenizer, which gives STS12-16 MTEB's text
form) is not in the image; the rest of that extra (datasets' pyarrow and pandas) is in the image.
polars travels without its 54 MB binary runtime: mteb imports polars only for its leaderboard tables,
which the claims run never builds (``tests/experiments/test_device_check.py`` scores MTEB tasks with the
runtime hidden). The data the claims run needs (corpus ``*.jsonl.gz``, GLUE
train/dev TSVs, the MTEB-lite folders) is copied from the shared folder: it must travel too, and it is
never committed (the carry folder is git-ignored). Everything that travels (the checkout plus this
folder) must stay under 64 MiB: ``check_travel_size`` refuses past it.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from megatron_crossbert.shared_data import default_or_error

from .program import CALLS, CARRY_LIMIT_BYTES, COMPILE_S_PER_SHAPE, DEFAULT_CARRY_DIR, GLUE_TASKS, call_timeout_s

DEVICE_WHEELS = ("megatron-core", "nltk", "defusedxml", "xxhash", "mteb", "datasets", "dill", "multiprocess",
                 "pydantic", "pydantic-core", "annotated-types", "typing-inspection", "pytrec-eval-terrier", "polars",
                 "accelerate", "sacremoses")
"""Packages the project imports that the device's image lacks (KINDS.md lists what it has)."""
MANYLINUX_TAGS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
                  "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")


class CarryTooLarge(ValueError):
    """What would travel is over the device's limit; the message names the folder and the sizes."""


@dataclass
class PrepareOptions:
    """Where the carry folder comes from and goes."""

    repo: str = "."
    """The checkout that travels (its tracked and untracked-not-ignored files count too)."""
    carry_dir: str = DEFAULT_CARRY_DIR
    """Folder to fill, relative to ``repo``; must be git-ignored."""
    shared_data: str | None = None
    """Source of ``corpus/*.jsonl.gz``, ``glue/<task>/{train,dev}.tsv`` and ``mteb_lite/``; None: the shared data
    folder (``megatron_crossbert.shared_data``), refused in one line where there is none."""
    wheels: bool = True
    """Download the wheels (needs a package index); off only for tests without network."""
    limit_bytes: int = CARRY_LIMIT_BYTES
    """Refuse past this many bytes in all."""

    def __post_init__(self) -> None:
        if self.shared_data is None:
            self.shared_data = default_or_error("--shared-data", "shared data folder")
        if self.limit_bytes <= 0:
            raise ValueError(f"PrepareOptions.limit_bytes must be positive, got {self.limit_bytes}")
        if Path(self.carry_dir).is_absolute() or ".." in Path(self.carry_dir).parts:
            raise ValueError(f"PrepareOptions.carry_dir must be a path inside the repo, got {self.carry_dir!r}")


def pinned_versions(pyproject: Path) -> dict[str, str]:
    """name==version for each device wheel: the installed version, which must meet pyproject's pin."""
    from packaging.requirements import Requirement

    project = tomllib.loads(pyproject.read_text())["project"]
    deps = project["dependencies"] + project.get("optional-dependencies", {}).get("eval", [])
    pins = {Requirement(dep).name: Requirement(dep).specifier for dep in deps}
    versions = {}
    for name in DEVICE_WHEELS:
        version = importlib.metadata.version(name)
        if name in pins and version not in pins[name]:
            raise ValueError(f"{pyproject}: installed {name} {version} does not satisfy the pin {name}{pins[name]}")
        versions[name] = version
    return versions


def pip_download_argv(versions: dict[str, str], dest: Path) -> list[str]:
    """``pip download`` for the device's interpreter (CPython 3.12, manylinux x86_64), no deps."""
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
            "--implementation", "cp", "--quiet", "-d", str(dest)]
    for tag in MANYLINUX_TAGS:
        argv += ["--platform", tag]
    return argv + [f"{name}=={version}" for name, version in versions.items()]


def copy_data(shared: Path, dest: Path) -> list[Path]:
    """Copy the corpus gz files, the claims tasks' GLUE TSVs and the MTEB-lite folders; returns the copied files."""
    corpus = sorted((shared / "corpus").glob("*.jsonl.gz"))
    if not corpus:
        raise FileNotFoundError(f"{shared / 'corpus'}: no *.jsonl.gz corpus files")
    mteb_lite = sorted(path for path in (shared / "mteb_lite").rglob("*") if path.is_file())
    if not any(path.name.startswith("test.") for path in mteb_lite):
        raise FileNotFoundError(f"{shared / 'mteb_lite'}: no MTEB-lite task folders (the claims run scores them)")
    pairs = [(path, dest / "corpus" / path.name) for path in corpus]
    pairs += [(path, dest / "mteb_lite" / path.relative_to(shared / "mteb_lite")) for path in mteb_lite]
    for task in GLUE_TASKS:
        for split in ("train", "dev"):
            source = shared / "glue" / task / f"{split}.tsv"
            if not source.is_file():
                raise FileNotFoundError(f"{source}: missing GLUE file (the claims probes need {task} {split})")
            pairs.append((source, dest / "glue" / task / f"{split}.tsv"))
    for source, target in pairs:
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.stat().st_size != source.stat().st_size:
            shutil.copyfile(source, target)
    return [target for _, target in pairs]


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def checkout_bytes(repo: Path) -> int:
    """Bytes of what travels without ``carry``: tracked plus untracked-not-ignored files."""
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.split(b"\0")
    files = {repo / name.decode() for name in listed if name}
    return sum(path.stat().st_size for path in files if path.is_file())


def check_travel_size(carry: Path, checkout: int, limit_bytes: int = CARRY_LIMIT_BYTES) -> int:
    """Total bytes that travel (checkout + carry folder); raises CarryTooLarge past ``limit_bytes``."""
    total = checkout + folder_bytes(carry)
    if total > limit_bytes:
        raise CarryTooLarge(f"{carry}: {folder_bytes(carry) / 2**20:.1f} MiB carried + {checkout / 2**20:.1f} MiB "
                            f"checkout = {total / 2**20:.1f} MiB, over the device limit of "
                            f"{limit_bytes / 2**20:.0f} MiB; carry less")
    return total


def require_ignored(repo: Path, carry_dir: str) -> None:
    """The carry folder must be git-ignored: its data may never be committed."""
    done = subprocess.run(["git", "-C", str(repo), "check-ignore", "-q", carry_dir.rstrip("/") + "/"])
    if done.returncode != 0:
        raise ValueError(f"{repo / carry_dir}: not git-ignored; add it to .gitignore before copying data into it")


def device_calls(carry_dir: str = DEFAULT_CARRY_DIR, compile_s: float = COMPILE_S_PER_SHAPE) -> list[dict]:
    """The ``run`` arguments of the device calls, in order (command, carry, timeout_s), compiles counted at
    ``compile_s`` each (passed on to the driver when it is not the estimate)."""
    calls, flag = [], "" if compile_s == COMPILE_S_PER_SHAPE else f" --compile-s {compile_s:g}"
    for stages in CALLS:
        command = f"PYTHONUNBUFFERED=1 bash scripts/device_check.sh run --stages {' '.join(stages)}{flag} 2>&1"
        calls.append({"command": command, "carry": [carry_dir], "timeout_s": call_timeout_s(stages, compile_s)})
    return calls


def calls_lines(calls: list[dict]) -> list[str]:
    """The printed device calls: each one's ``run`` arguments as JSON, in order, and when to fire it."""
    lines = ["Device calls (device `run` arguments), in order:"]
    lines += [f"{index}. {json.dumps(call)}" for index, call in enumerate(calls, 1)]
    return lines + ["Call 2 only if call 1 needs no rerun; call 3 in a window of its own; rerun only failed stages "
                    "with `--stages NAME ...` in call 1's command, timeout_s their budgets plus the install margin."]


def prepare(options: PrepareOptions) -> dict:
    """Fill the carry folder, check its size, and return what the device calls need."""
    repo = Path(options.repo).resolve()
    carry = repo / options.carry_dir
    require_ignored(repo, options.carry_dir)
    versions = pinned_versions(repo / "pyproject.toml")
    if options.wheels:
        (carry / "wheels").mkdir(parents=True, exist_ok=True)
        subprocess.run(pip_download_argv(versions, carry / "wheels"), check=True)
    copied = copy_data(Path(options.shared_data), carry / "data")
    checkout = checkout_bytes(repo)
    total = check_travel_size(carry, checkout, options.limit_bytes)
    return {"carry_dir": str(carry), "wheels": versions if options.wheels else {}, "data_files": len(copied),
            "carry_bytes": folder_bytes(carry), "checkout_bytes": checkout, "travel_bytes": total,
            "limit_bytes": options.limit_bytes, "calls": device_calls(options.carry_dir)}


def prepare_summary(result: dict) -> str:
    """What ``prepare`` prints: sizes, then each device call's exact ``run`` arguments as JSON."""
    from .budget import program_lines

    lines = [f"carry folder {result['carry_dir']}: {result['carry_bytes'] / 2**20:.1f} MiB "
             f"({result['data_files']} data files, wheels {result['wheels'] or 'not downloaded'}); checkout "
             f"{result['checkout_bytes'] / 2**20:.1f} MiB; travels {result['travel_bytes'] / 2**20:.1f} MiB of "
             f"{result['limit_bytes'] / 2**20:.0f} MiB", "", *program_lines(), "", *calls_lines(result["calls"])]
    return "\n".join(lines)
