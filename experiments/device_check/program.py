"""Stage budgets and the device calls: the one home of every stage's numbers and of which call runs it.

The lent GPU gives 15 minutes of device time in all, start-ups (1-2 minutes per fresh machine), idle
waits and the close included, and at most 10 minutes per call; what travels with the checkout is capped at
64 MiB. Call 1 answers the most per second (CUDA facts, the NCCL all-reduce, bf16 steps of every arm,
gpu_check at base size, the attention kernels) in at most 7 minutes, compiles included; call 2 (the memory
check) fires only when call 1 needs no rerun; call 3 (the claims run: tokenizer, preprocessing, calibration,
four trainer processes and probes) needs a window of its own. ``budget`` does the arithmetic (start-ups, a
failed start, idle, close, compiles, overruns, the rerun reserve), says whether it fits and prints what falls
outside the window. Each stage runs in its own process, stops itself inside its budget and is killed just past
it, so one stage that hangs or crashes cannot take the next one's time or results. A stage is added by ONE
``StageSpec`` in ``STAGES``: its entry point, budget, compiles and call are all there.
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


COMPILE_S_PER_SHAPE = 20.0
"""Seconds one compiled shape costs on the GPU (a cold flex forward + backward and its block mask, inductor):
an estimate, the number every stage's compile allowance is counted in. Call 1's gpu_check measures the real
one (``compile_s_per_shape`` in its result); ``program --measured`` and ``run --compile-s`` then count with it."""
STAGE_OVERRUN_S = 2 * KILL_GRACE_S
"""How long a stage can run past its budget: its own alarm cannot fire inside a C call (a kernel, a compile), so
the driver's backstop ends it, SIGTERM then SIGKILL, each waited ``KILL_GRACE_S``."""


@dataclass(frozen=True)
class StageSpec:
    """One stage of the device check: its entry point, its budget and the call that runs it."""

    name: str
    """Stage id used by ``--stages`` and in the result files."""
    entry: str
    """``module:function`` inside this package; the function takes the ``DeviceCheckConfig`` and returns a dict."""
    run_s: float
    """Seconds of work on the GPU once every shape is compiled, the stage process's imports included."""
    compiles: int
    """Compiled shapes (flex/inductor) the stage makes on the GPU; each costs ``COMPILE_S_PER_SHAPE``. smoke: none
    (its tiny cases run without document masks, SDPA); gpu_check: BERT-base's 7; attention: L=8192 and
    BERT-base's L=512 x 32 (its MFU runs have no masks, so no flex)."""
    call: int
    """Device call that runs it (1: the first, fired at once; 2: only when call 1 needs no rerun; 3: the claims
    run, a window of its own)."""
    toy_budget_s: float
    """Limit for the CPU dry run: only a guard against hangs (2 shared cores can be 10x slow under load)."""
    summary: str
    """What it checks, for the printed program and the report."""

    def budget(self, toy: bool, compile_s: float = COMPILE_S_PER_SHAPE) -> float:
        """Wall-clock limit: on the device its work plus its compiles at ``compile_s`` each (the stage stops
        itself inside it); in the dry run the toy guard."""
        return self.toy_budget_s if toy else self.run_s + self.compiles * compile_s


STAGES: tuple[StageSpec, ...] = (
    StageSpec("smoke", "stages:run_smoke", 60, 0, 1, 300,
              "CUDA facts, one-rank NCCL all-reduce, bf16 train steps of every architecture, "
              "tests/benchmarking/test_gpu.py"),
    StageSpec("gpu_check", "stages:run_gpu_check_stage", 60, 7, 1, 300,
              "crossbert-bench gpu-check at BERT-base L=512: bf16 MFU, CrossBERT vs sparse megatron BertModel, "
              "GEMM peak, FLOP-predicted ratios, the measured compile time"),
    StageSpec("attention", "attention_stage:run_attention", 45, 2, 1, 300,
              "bf16 MFU with SDPA vs megatron's unfused attention; compiled FlexAttention vs SDPA with document "
              "masks at L=8192 (and windows) and at BERT-base's L=512 (tokens/s, memory, gradients)"),
    StageSpec("memory", "memory_stage:run_memory", 20, 0, 2, 300,
              "crossbert-plan's predicted memory against torch.cuda.max_memory_allocated for BERT and CrossBERT "
              "arms at the claims shape"),
    StageSpec("claims", "claims:run_claims", 420, 4, 3, 600,
              "equal-FLOPs bf16 pretraining of MLM baseline and CrossBERT arms (tokenizer, preprocessing, "
              "calibration, four trainers), frozen probes on GLUE dev"),
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


def call_timeout_s(stages: tuple[str, ...], compile_s: float = COMPILE_S_PER_SHAPE) -> int:
    """The ``timeout_s`` of one device call: the install margin plus each stage's budget and overrun."""
    return int(INSTALL_MARGIN_S + sum(stage(name).budget(False, compile_s) + STAGE_OVERRUN_S for name in stages))


@dataclass
class ClaimsSettings:
    """Knobs of the claims stage."""

    train_seconds: float = 90.0
    """Wall time all arms' training together should take; sets the shared FLOPs budget (of the claims stage's
    work, the rest is the tokenizer, preprocessing, calibration, the trainers' start-ups, probes and MTEB-lite)."""
    seeds: list[int] | None = None
    """Seeds in order (None: the claims study's h200 plan's); each after the first runs only if the previous one's time still fits."""
    probe_max_train: int | None = None
    """Train rows per probe task (None: the claims study's h200 plan's; the dev sets are always used in full on the device)."""
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
    compile_s_per_shape: float = COMPILE_S_PER_SHAPE
    """Seconds each compiled shape adds to a stage's budget: the estimate, or what call 1 measured."""

    def __post_init__(self) -> None:
        for name in self.stages:
            stage(name)
        self.stages = [name for name in STAGE_NAMES if name in self.stages]
        if not self.stages:
            raise ValueError("DeviceCheckConfig.stages must name at least one stage")
        if self.compile_s_per_shape <= 0:
            raise ValueError(f"DeviceCheckConfig.compile_s_per_shape must be > 0, got {self.compile_s_per_shape}")

    def budget(self, name: str) -> float:
        """Stage ``name``'s budget in this run (toy guard, or work plus compiles at this run's constant)."""
        return stage(name).budget(self.toy, self.compile_s_per_shape)


def module_env(**extra: str) -> dict[str, str]:
    """This process's environment with ``REPO_ROOT`` first on ``PYTHONPATH``, for ``python -m experiments...``."""
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **extra}


def config_from_dict(raw: dict) -> DeviceCheckConfig:
    """Inverse of ``dataclasses.asdict`` (how the driver hands its config to each stage process)."""
    return DeviceCheckConfig(**{**raw, "claims": ClaimsSettings(**raw.get("claims", {}))})
