"""Stage budgets and the device calls: the one home of every stage's numbers and of which call runs it.

The lent H200 gives 15 minutes of device time in all, start-up (1-2 minutes per fresh machine)
included, and at most 10 minutes per call; what travels with the checkout is capped at 64 MiB.
Call 1 answers the most per second (CUDA facts, the NCCL all-reduce, bf16 steps of every arm,
gpu_check at base size, the attention kernels) in at most 7 minutes, compiles included; the claims
run is call 2, fired only when call 1 needs no rerun. ``budget`` does the arithmetic (start-ups,
compiles, the rerun reserve) and says whether it fits. Each stage runs in its own process, stops itself
inside its budget and is killed at it, so one stage that hangs or crashes cannot take the next one's
time or results. A stage is added by ONE ``StageSpec`` in ``STAGES``: its entry point, budget, compiles
and call are all there.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The checkout this experiment runs from: its ``tests/benchmarking/test_gpu.py`` runs in the smoke stage, and it
is on the ``PYTHONPATH`` of every process the driver starts (``python -m experiments.device_check...``)."""
CARRY_LIMIT_BYTES = 64 * 2**20
"""What may travel with one device call (checkout plus carried paths)."""
OUT_FILE_LIMIT = 8
"""Files that come back from $OUT."""
INSTALL_MARGIN_S = 30
"""Wheel install and import check, interpreter start and result writing, per call."""
KILL_GRACE_S = 5
"""Seconds the driver waits after each of SIGTERM and SIGKILL when it ends a stage at its budget (the backstop
when the stage's own alarm cannot fire inside a C call)."""
DEFAULT_CARRY_DIR = ".device_carry"
"""Git-ignored folder named in ``carry`` (wheels/ and data/ inside)."""
DEFAULT_WORK_DIR = str(Path(tempfile.gettempdir()) / "crossbert_device_check")
"""Scratch space on the device (checkpoints, tokenizer, caches); never comes back."""
GLUE_TASKS = ("CoLA", "SST-2", "MRPC", "STS-B", "RTE")
"""The claims run's frozen-probe tasks (full dev sets on the GPU)."""


COMPILE_S_PER_SHAPE = 8
"""Seconds one compiled shape costs on the H200 (flex forward + backward, inductor): an estimate, the
number every stage's compile allowance is counted in; the first device call measures the real one."""


@dataclass(frozen=True)
class StageSpec:
    """One stage of the device check: its entry point, its budget and the call that runs it."""

    name: str
    """Stage id used by ``--stages`` and in the result files."""
    entry: str
    """``module:function`` inside this package; the function takes the ``DeviceCheckConfig`` and returns a dict."""
    run_s: float
    """Seconds of work on the H200 once every shape is compiled."""
    compiles: int
    """Compiled shapes (flex/inductor) the stage makes on the H200; each costs ``COMPILE_S_PER_SHAPE``. smoke: the
    tiny cases' 9 shapes, compiled again in test_gpu.py's own process from inductor's on-disk cache (counted as 3);
    gpu_check: BERT-base's 7; attention: one L=8192 shape (its MFU runs have no masks, so no flex)."""
    call: int
    """Device call that runs it (1: the first, fired at once; 2: only when call 1 needs no rerun)."""
    toy_budget_s: float
    """Limit for the CPU dry run: only a guard against hangs (2 shared cores can be 10x slow under load)."""
    summary: str
    """What it checks, for the printed plan and the report."""

    @property
    def compile_s(self) -> float:
        return self.compiles * COMPILE_S_PER_SHAPE

    @property
    def budget_s(self) -> float:
        """Wall-clock limit on the device (work plus compiles); the stage stops itself inside it."""
        return self.run_s + self.compile_s

    def budget(self, toy: bool) -> float:
        return self.toy_budget_s if toy else self.budget_s


STAGES: tuple[StageSpec, ...] = (
    StageSpec("smoke", "stages:run_smoke", 70, 12, 1, 300,
              "CUDA facts, one-rank NCCL all-reduce, bf16 train steps of every architecture, "
              "tests/benchmarking/test_gpu.py"),
    StageSpec("gpu_check", "stages:run_gpu_check_stage", 90, 7, 1, 300,
              "crossbert-bench gpu-check at BERT-base L=512: bf16 MFU, CrossBERT vs sparse megatron BertModel, "
              "GEMM peak, FLOP-predicted ratios"),
    StageSpec("attention", "attention_stage:run_attention", 70, 1, 1, 300,
              "compiled FlexAttention vs SDPA at L=8192 with document masks and windows (tokens/s, memory, "
              "gradients); bf16 MFU with SDPA vs megatron's unfused attention"),
    StageSpec("memory", "memory_stage:run_memory", 20, 0, 2, 300,
              "crossbert-plan's predicted memory against torch.cuda.max_memory_allocated for BERT and CrossBERT "
              "arms at the claims shape"),
    StageSpec("claims", "claims:run_claims", 215, 4, 2, 600,
              "equal-FLOPs bf16 pretraining of MLM baseline and CrossBERT arms, frozen probes on GLUE dev"),
)
STAGE_NAMES = tuple(stage.name for stage in STAGES)
CALLS: tuple[tuple[str, ...], ...] = tuple(
    tuple(spec.name for spec in STAGES if spec.call == number) for number in sorted({s.call for s in STAGES}))
"""Stages of each device call, in order, from each stage's ``call``."""


def stage(name: str) -> StageSpec:
    for spec in STAGES:
        if spec.name == name:
            return spec
    raise ValueError(f"unknown stage {name!r}; choose from {', '.join(STAGE_NAMES)}")


def call_timeout_s(stages: tuple[str, ...]) -> int:
    """The ``timeout_s`` of one device call: its stages' budgets plus the install margin."""
    return int(sum(stage(name).budget_s for name in stages) + INSTALL_MARGIN_S)


@dataclass
class ClaimsSettings:
    """Knobs of the claims stage."""

    train_seconds: float = 90.0
    """Wall time all arms' training together should take; sets the shared FLOPs budget (of the claims stage's
    235 s of work, the rest is calibration, probes and MTEB-lite)."""
    seeds: list[int] | None = None
    """Seeds in order (None: the plan's); each after the first runs only if the previous one's time still fits."""
    probe_max_train: int | None = None
    """Train rows per probe task (None: the plan's; the dev sets are always used in full on the device)."""
    probe_workers: int = 4
    """Processes probing checkpoints in parallel (sklearn is CPU-bound; the device has 16 cores)."""

    def __post_init__(self) -> None:
        if self.train_seconds <= 0 or (self.probe_max_train is not None and self.probe_max_train < 2) \
                or self.probe_workers < 1:
            raise ValueError("ClaimsSettings: train_seconds > 0, probe_max_train >= 2, probe_workers >= 1")
        if self.seeds is not None and (not self.seeds or len(set(self.seeds)) != len(self.seeds)):
            raise ValueError(f"ClaimsSettings.seeds must be distinct and non-empty, got {self.seeds}")


@dataclass
class DeviceCheckConfig:
    """One invocation of the device check (``scripts/device_check.sh run``)."""

    toy: bool = False
    """Toy sizes on the CPU (the dry run) instead of the H200 sizes."""
    stages: list[str] = field(default_factory=lambda: list(STAGE_NAMES))
    """Stages to run, in the order of ``STAGES``."""
    out_dir: str = field(default_factory=lambda: os.environ.get("OUT", "benchmarks/out/device_check"))
    """Where the JSON, markdown and logs go ($OUT on the device; at most 8 files)."""
    work_dir: str = DEFAULT_WORK_DIR
    """Scratch folder (checkpoints, tokenizer, data); created by this run."""
    corpus: str = f"{DEFAULT_CARRY_DIR}/data/corpus"
    """Corpus folder (JSONL.gz) for the claims run."""
    glue_dir: str = f"{DEFAULT_CARRY_DIR}/data/glue"
    """GLUE TSV folder (glue_data layout) for the claims probes."""
    mteb_lite_dir: str = f"{DEFAULT_CARRY_DIR}/data/mteb_lite"
    """MTEB-lite folders (STS12-16, Banking77) every claims checkpoint is also scored on, by mteb."""
    command: str = ""
    """The exact command line, recorded in the results."""
    claims: ClaimsSettings = field(default_factory=ClaimsSettings)
    """Claims stage settings."""

    def __post_init__(self) -> None:
        for name in self.stages:
            stage(name)
        self.stages = [name for name in STAGE_NAMES if name in self.stages]
        if not self.stages:
            raise ValueError("DeviceCheckConfig.stages must name at least one stage")


def module_env(**extra: str) -> dict[str, str]:
    """This process's environment with ``REPO_ROOT`` first on ``PYTHONPATH``, for ``python -m experiments...``."""
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **extra}


def config_from_dict(raw: dict) -> DeviceCheckConfig:
    """Inverse of ``dataclasses.asdict`` (how the driver hands its config to each stage process)."""
    return DeviceCheckConfig(**{**raw, "claims": ClaimsSettings(**raw.get("claims", {}))})
