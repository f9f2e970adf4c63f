"""Checkpoint cost: save and load seconds, MB/s and bytes on disk at several model sizes.

Every measurement goes through the project's own checkpoint code (``save_checkpoint`` /
``load_checkpoint`` for the full training state, ``save_model_only`` / ``read_model_weights`` for
weights alone), in one process (world size 1, TP=PP=DP=1) with the distributed optimizer, so the
full-state numbers include the ``fully_reshardable`` gather. Cases per size:

* ``model`` sync / async: weights only;
* ``full`` sync ``dp_reshardable``: the format written before (the "before" row);
* ``full`` sync / async ``fully_reshardable``: the format written now.

For async saves two times are reported: *blocking* (until training may continue) and *total*
(until the checkpoint is committed). Loads are always synchronous and verify the checkpoint's
checksums first unless ``verify="off"``. Two parts are timed on their own: *record* (hashing every
file of the written checkpoint the way the commit does, part of every save) and *verify* (the
checksum check inside the load), so their share of a save and a load can be read off one run.
Every case runs once untimed at the ``tiny`` size first. The optimizer state is primed
(zero moments) instead of trained: the bytes written do not depend on the values. Each case writes
into a fresh directory under ``work_dir`` created by this run and removes it after measuring.
Wall time on a shared CPU also counts other jobs; ``cpu_s`` (this process's CPU time, writer
processes of async saves excluded) is recorded beside it.
"""

from __future__ import annotations

import math
import platform as py_platform
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from megatron_crossbert.progress import progress_bar

if TYPE_CHECKING:
    from tqdm import tqdm

SIZES: dict[str, dict] = {
    "tiny": dict(hidden_size=64, num_layers=2, num_attention_heads=2, vocab_size=512),
    "10M": dict(hidden_size=256, num_layers=8, num_attention_heads=4, vocab_size=16384),
    "50M": dict(hidden_size=512, num_layers=12, num_attention_heads=8, vocab_size=16384),
    "200M": dict(hidden_size=1024, num_layers=14, num_attention_heads=16, vocab_size=16384),
}
"""CrossBERT encoder shapes (1 decoder layer, L=64) with roughly 10M, 50M and 200M parameters;
``tiny`` is for smoke tests only."""

CASES: list[tuple[str, str, str]] = [
    ("model", "sync", "-"), ("model", "async", "-"),
    ("full", "sync", "dp_reshardable"), ("full", "sync", "fully_reshardable"),
    ("full", "async", "fully_reshardable"),
]
"""(state, mode, distributed-optimizer format) measured at every size."""


@dataclass
class CheckpointBenchOptions:
    """What to measure; the defaults take a few minutes on 2 CPU cores and need ~6 GB of RAM."""

    sizes: list[str] = field(default_factory=lambda: ["10M", "50M", "200M"])
    """Names from ``SIZES``."""
    repeats: int = 2
    """Saves and loads per case; the median is reported."""
    work_dir: str | None = None
    """Where the temporary checkpoints go (default: the system temp dir)."""
    seed: int = 1234
    verify: str = "full"
    """``checkpoint.verify`` of the loads: full (checksums checked before reading) or off."""

    def __post_init__(self) -> None:
        if self.verify not in ("full", "off"):  # CheckpointConfig.verify's values
            raise ValueError(f"verify must be 'full' or 'off', got {self.verify!r}")
        unknown = [s for s in self.sizes if s not in SIZES]
        if unknown or not self.sizes:
            raise ValueError(f"unknown or no sizes {unknown}; choose from {sorted(SIZES)}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")


def size_config(name: str):
    """The RunConfig of one benchmark size (distributed optimizer on, fp32)."""
    from megatron_crossbert.config import load_run_config

    shape = SIZES[name]
    overrides = [f"model.{key}={value}" for key, value in shape.items()]
    overrides += ["model.arch=crossbert", "model.decoder_num_layers=1", "model.max_position_embeddings=64",
                  "data.seq_length=64", "parallel.use_distributed_optimizer=true"]
    return load_run_config(None, overrides)


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


class _Clock:
    """Wall and process-CPU seconds of a block."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


MODEL_DIR = "iter_0000000"
"""Where both model-only saves put the weights (``save_model_only`` at iteration 0)."""
FULL_DIR = "iter_0000001"
"""Where the full-state saves go (``save_checkpoint`` at iteration 1)."""


def _save_model(trainable, ckpt_root: Path, mode: str) -> float | None:
    """Weights only; returns the blocking seconds of an async save (None when sync)."""
    from megatron_crossbert.checkpoint.save import AsyncSaves, save_model_only, seal_model_only

    if mode == "sync":
        save_model_only(trainable.model, trainable.run_cfg, ckpt_root)
        return None
    ckpt_dir = ckpt_root / MODEL_DIR
    ckpt_dir.mkdir(parents=True)
    saves = AsyncSaves()
    with _Clock() as blocking:
        saves.start({"model": trainable.model.sharded_state_dict()}, ckpt_dir, None,
                    lambda: seal_model_only(ckpt_dir, trainable.run_cfg))
    saves.finalize(blocking=True)
    return blocking.wall


def _save_full(trainable, ckpt_root: Path, mode: str, sharding_type: str) -> float | None:
    """Full training state through save_checkpoint; blocking seconds of an async save."""
    from megatron_crossbert.checkpoint.save import RunSaves, save_checkpoint
    from megatron_crossbert.checkpoint.state import Progress

    cfg = trainable.run_cfg
    cfg.checkpoint.async_save = mode == "async"
    saves = RunSaves()
    with _Clock() as blocking:
        save_checkpoint(saves, ckpt_root, trainable.model, trainable.optimizer, trainable.scheduler, Progress(1, 8), cfg,
                        sharding_type=sharding_type)
    saves.finalize(blocking=True)
    return blocking.wall if mode == "async" else None


def _load(trainable, ckpt_root: Path, state: str, verify: str) -> _Clock:
    """Verify, then load, as resume and export do; returns the clock of the checksum check alone."""
    from megatron_crossbert.checkpoint.directories import resolve_checkpoint_dir
    from megatron_crossbert.checkpoint.load import load_checkpoint, read_model_weights
    from megatron_crossbert.checkpoint.verify import open_checkpoint, verify_checkpoint, verify_contents

    cfg = trainable.run_cfg
    cfg.checkpoint.verify = verify
    if state == "model":
        with _Clock() as check:  # also resolves the directory and parses run_config.json (~1 ms)
            source = open_checkpoint(ckpt_root / MODEL_DIR, verify)
        read_model_weights(trainable.model, source)
    else:
        source = verify_checkpoint(resolve_checkpoint_dir(ckpt_root), cfg)
        with _Clock() as check:
            source = verify_contents(source, verify)
        load_checkpoint(source, trainable.model, trainable.optimizer, trainable.scheduler, cfg)
    return check


def _record(ckpt_dir: Path) -> _Clock:
    """Hash the written checkpoint the way the commit does (world size 1: every file), timed."""
    from megatron_crossbert.checkpoint.checksums import own_shards, write_record
    from megatron_crossbert.checkpoint.directories import RUN_CONFIG_FILE

    with _Clock() as clock:
        pending = {RUN_CONFIG_FILE: (ckpt_dir / RUN_CONFIG_FILE).read_bytes()}
        write_record(ckpt_dir, own_shards(ckpt_dir, 0), pending)
    return clock


def _median(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


RUN_KEYS = ("save_s", "save_cpu_s", "blocking_s", "record_s", "record_cpu_s", "load_s", "load_cpu_s",
            "verify_s", "verify_cpu_s")
"""Per-repeat measurements of a case (the report gives their medians)."""


def measure_case(trainable, work_dir: Path, case: tuple[str, str, str], repeats: int, verify: str = "full") -> dict:
    """Median save/load times of one (state, mode, format) case, and the bytes it wrote."""
    state, mode, fmt = case
    runs: dict[str, list] = {key: [] for key in RUN_KEYS}
    size = 0
    for _ in range(repeats):
        root = Path(tempfile.mkdtemp(prefix="ckpt_bench_", dir=work_dir))
        try:
            with _Clock() as save:
                blocking = (_save_model(trainable, root, mode) if state == "model"
                            else _save_full(trainable, root, mode, fmt))
            size = disk_bytes(root)
            record = _record(root / (MODEL_DIR if state == "model" else FULL_DIR))
            with _Clock() as load:
                check = _load(trainable, root, state, verify)
        finally:
            shutil.rmtree(root, ignore_errors=True)  # created by this run, above
        for key, value in zip(RUN_KEYS, (save.wall, save.cpu, blocking, record.wall, record.cpu, load.wall, load.cpu,
                                         check.wall, check.cpu)):
            runs[key].append(value)
    result = {"state": state, "mode": mode, "format": fmt, "bytes": size, "runs": runs}
    result.update({key: _median(values) for key, values in runs.items()})
    result["save_MBps"] = size / 1e6 / result["save_s"]
    result["load_MBps"] = size / 1e6 / result["load_s"]
    return result


@dataclass
class _Trainable:
    run_cfg: object
    model: torch.nn.Module
    optimizer: object
    scheduler: object


def build_size(name: str) -> _Trainable:
    """Model, distributed optimizer (with primed Adam state) and scheduler of one size."""
    from megatron_crossbert.checkpoint.optimizer_format import prime_optimizer_state
    from megatron_crossbert.training.setup import build_trainable

    cfg = size_config(name)
    model, _ddp, optimizer, scheduler = build_trainable(cfg)
    prime_optimizer_state(optimizer)
    return _Trainable(cfg, model, optimizer, scheduler)


def measure_size(name: str, options: CheckpointBenchOptions, work_dir: Path, progress: tqdm) -> dict:
    trainable = build_size(name)
    params = sum(p.numel() for p in trainable.model.parameters())
    cases = []
    for case in CASES:
        progress.set_postfix_str(f"{name} {'/'.join(case)}")
        cases.append(measure_case(trainable, work_dir, case, options.repeats, options.verify))
        progress.update()
    del trainable
    return {"size": name, "shape": SIZES[name], "num_parameters": params, "cases": cases}


def warm_up(work_dir: Path, options: CheckpointBenchOptions) -> None:
    """Every case once at the tiny size, untimed: first use of the writer paths costs seconds."""
    trainable = build_size("tiny")
    for case in CASES:
        measure_case(trainable, work_dir, case, 1, options.verify)


def growth_exponents(sizes: list[dict]) -> dict[str, dict[str, float]]:
    """Per case: exponent k of seconds ~ parameters^k between the smallest and largest size."""
    if len(sizes) < 2:
        return {}
    small, large = min(sizes, key=lambda s: s["num_parameters"]), max(sizes, key=lambda s: s["num_parameters"])
    ratio = math.log(large["num_parameters"] / small["num_parameters"])
    out = {}
    for a, b in zip(small["cases"], large["cases"]):
        key = "/".join((a["state"], a["mode"], a["format"]))
        out[key] = {m: math.log(b[m] / a[m]) / ratio for m in ("save_s", "load_s", "bytes") if a[m] and b[m]}
    return out


def run_checkpoint_bench(options: CheckpointBenchOptions) -> dict:
    """Measure every case at every size; returns the JSON-ready report."""
    from megatron_crossbert.config import ParallelConfig
    from megatron_crossbert.platform.distributed import initialize

    initialize(ParallelConfig(use_distributed_optimizer=True), options.seed)
    work_dir = Path(options.work_dir or tempfile.gettempdir())
    work_dir.mkdir(parents=True, exist_ok=True)
    with progress_bar(total=len(options.sizes) * len(CASES), desc="checkpoint bench", unit="case") as progress:
        warm_up(work_dir, options)
        sizes = [measure_size(name, options, work_dir, progress) for name in options.sizes]
    meta = {"benchmark": "checkpoint", "options": asdict(options), "torch_threads": torch.get_num_threads(),
            "device": "cuda" if torch.cuda.is_available() else "cpu", "host": py_platform.processor() or "cpu",
            "layout": "world size 1 (TP=PP=DP=1), distributed optimizer, fp32",
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    return {"meta": meta, "sizes": sizes, "growth": growth_exponents(sizes)}
