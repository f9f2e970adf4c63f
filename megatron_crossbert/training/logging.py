"""Training metrics: console lines, TensorBoard, Weights & Biases and a tqdm bar.

Figures are computed over each log interval from values every rank already agrees on (the step
losses are all-reduced in ``steps.py``), so only global rank 0 writes. Throughput is reported as
samples/s, input tokens/s (samples x seq_length), supervised tokens/s (positions that carry a loss:
all targets of every view for CrossBERT, the 15% for BERT) and MFU against ``platform.peak`` (the
flag, else the GEMM rate measured on this GPU at start).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass, field

import psutil
import torch

from megatron_crossbert.platform.peak import mfu, mfu_peak
from megatron_crossbert.progress import progress_bar


def memory_report() -> tuple[str, float]:
    """('cuda max alloc' | 'rss', GiB): CUDA peak allocation on GPU, process RSS on CPU."""
    if torch.cuda.is_available():
        return "cuda max alloc", torch.cuda.max_memory_allocated() / 2**30
    return "rss", psutil.Process().memory_info().rss / 2**30


@dataclass
class IntervalStats:
    """Accumulates step results between two log lines."""

    steps: int = 0
    loss_sum: float = 0.0
    tokens: float = 0.0
    samples: int = 0
    """Sequences of the steps that were applied (the batch may change during a batch-size warmup)."""
    skipped: int = 0
    excluded: float = 0.0
    """Seconds spent on validation, probes and checkpoints: not training throughput."""
    start: float = field(default_factory=time.perf_counter)

    def add(self, loss_sum: float, num_tokens: float, skipped: bool, samples: int) -> None:
        self.steps += 1
        if skipped:
            self.skipped += 1
            return
        self.loss_sum += loss_sum
        self.tokens += num_tokens
        self.samples += samples


class MetricsLogger:
    """Owns the writers; ``log_step`` computes and emits one interval's metrics."""

    def __init__(self, run_cfg, *, world_size: int, flops_per_sample: float | None, enabled: bool,
                 start_iteration: int = 0) -> None:
        self.cfg = run_cfg
        self.world_size = world_size
        self.flops_per_sample = flops_per_sample
        self.enabled = enabled
        self.interval = IntervalStats()
        self.tb = self._tensorboard() if enabled else None
        self.wandb = self._wandb() if enabled else None
        self.peak = mfu_peak(run_cfg.training.peak_tflops)
        if enabled:
            print(f"MFU peak: {self.peak.tflops or 0:.0f} TFLOP/s per device ({self.peak.source})", flush=True)
        # a bar only on a terminal: a log file gets the step lines alone
        self.bar = progress_bar(total=run_cfg.training.train_iters, initial=start_iteration, unit="step",
                                dynamic_ncols=True) if enabled and sys.stdout.isatty() else None

    def _tensorboard(self):
        train, ckpt = self.cfg.training, self.cfg.checkpoint
        log_dir = train.tensorboard_dir or (os.path.join(ckpt.save_dir, "tensorboard") if ckpt.save_dir else None)
        if not log_dir:
            return None
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(log_dir=log_dir)

    def _wandb(self):
        if not self.cfg.training.wandb_project:
            return None
        try:
            import wandb
        except ImportError:
            print("wandb_project is set but wandb is not installed; skipping W&B logging", flush=True)
            return None
        return wandb.init(project=self.cfg.training.wandb_project, config=self.cfg.to_dict())

    def record(self, loss_sum: float, num_tokens: float, skipped: bool, samples: int) -> None:
        """One step's results; ``samples`` = its global batch."""
        self.interval.add(loss_sum, num_tokens, skipped, samples)
        if self.bar is not None:
            self.bar.update(1)

    def exclude(self, seconds: float) -> None:
        """Leave non-training time (validation, probes, saves) out of the throughput figures."""
        self.interval.excluded += seconds

    def compute(self, lr: float, grad_norm: float | None) -> dict[str, float]:
        """Interval metrics; resets the interval. Safe to call on every rank."""
        stats, now = self.interval, time.perf_counter()
        elapsed = max(now - stats.start - stats.excluded, 1e-9)
        samples = stats.samples
        metrics = {"loss": stats.loss_sum / max(stats.tokens, 1.0), "lr": lr,
                   "samples_per_s": samples / elapsed,
                   "tokens_per_s": samples * self.cfg.data.seq_length / elapsed,
                   "supervised_tokens_per_s": stats.tokens / elapsed,
                   "step_time_s": elapsed / max(stats.steps, 1), "skipped_steps": float(stats.skipped)}
        if grad_norm is not None:
            metrics["grad_norm"] = grad_norm
        if self.peak.tflops and self.flops_per_sample:
            metrics["mfu"] = mfu(self.flops_per_sample * metrics["samples_per_s"], self.peak, self.world_size)
        metrics["memory_gib"] = memory_report()[1]
        self.interval = IntervalStats()
        return metrics

    def log_step(self, iteration: int, lr: float, grad_norm: float | None) -> dict[str, float]:
        metrics = self.compute(lr, grad_norm)
        if self.enabled:
            self._emit(iteration, metrics, prefix="train")
        return metrics

    def log_validation(self, iteration: int, loss: float) -> None:
        if self.enabled:
            self._write(iteration, {"loss": loss}, prefix="valid")
            self.print(f"step {iteration} | validation loss {loss:.4f}")

    def write_scalars(self, iteration: int, metrics: dict[str, float], prefix: str) -> None:
        """Extra scalars (e.g. probe results) to TensorBoard/W&B and one console line."""
        if self.enabled and metrics:
            self._write(iteration, metrics, prefix)
            self.print(f"step {iteration} | {prefix}: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))

    def _emit(self, iteration: int, metrics: dict[str, float], prefix: str) -> None:
        self._write(iteration, metrics, prefix)
        self.print(format_line(iteration, self.cfg.training.train_iters, metrics))

    def _write(self, iteration: int, metrics: dict[str, float], prefix: str) -> None:
        if self.tb is not None:
            with self._tensorboard_io():
                for name, value in metrics.items():
                    self.tb.add_scalar(f"{prefix}/{name}", value, iteration)
                self.tb.flush()
        if self.wandb is not None:
            self.wandb.log({f"{prefix}/{k}": v for k, v in metrics.items()}, step=iteration)

    def print(self, line: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line, flush=True)

    @contextlib.contextmanager
    def _tensorboard_io(self):
        """A TensorBoard write that fails (a full disk) stops TensorBoard logging with one warning; it
        never ends the run, nor hides the error that does (a failed checkpoint save says why)."""
        try:
            yield
        except OSError as err:
            print(f"warning: TensorBoard logging stopped: {self.tb.log_dir}: {err}", file=sys.stderr, flush=True)
            self.tb = None

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.tb is not None:
            with self._tensorboard_io():
                self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def format_line(iteration: int, total: int, m: dict[str, float]) -> str:
    """One console line; field names are stable so log scrapers can rely on them."""
    parts = [f"step {iteration}/{total}", f"loss {m['loss']:.4f}", f"lr {m['lr']:.3e}"]
    if "grad_norm" in m:
        parts.append(f"grad norm {m['grad_norm']:.3f}")
    parts += [f"{m['samples_per_s']:.1f} samples/s", f"{m['tokens_per_s']:.0f} tokens/s",
              f"{m['supervised_tokens_per_s']:.0f} supervised tokens/s", f"{m['step_time_s'] * 1000:.0f} ms/step"]
    if "mfu" in m:
        parts.append(f"MFU {100 * m['mfu']:.1f}%")
    kind = "cuda max alloc" if torch.cuda.is_available() else "rss"
    parts.append(f"mem {kind} {m['memory_gib']:.2f} GiB")
    if m.get("skipped_steps"):
        parts.append(f"skipped {int(m['skipped_steps'])}")
    return " | ".join(parts)
