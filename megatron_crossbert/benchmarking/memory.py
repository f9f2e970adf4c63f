"""Peak memory of one training step, measured in a way that works while models are interleaved.

* CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` around the model's
  steps. This is the allocator's true peak (parameters, grads, optimizer state and activations of
  this model, plus whatever other models still hold: all models stay resident, so the number is
  reported both raw and minus the memory allocated just before the step).
* CPU: there is no allocator peak counter, and tracemalloc does not see torch's allocations. A
  background thread samples the process RSS (psutil) every ~2 ms during the step; the reported
  value is peak RSS minus the RSS just before the step, i.e. the transient memory of the step
  (activations, gradients not yet folded into buffers, temporary GEMM workspaces). For RSS to
  follow live tensors, glibc must not recycle freed blocks inside its heap: before measuring (and
  after all timing is done) we pin glibc's mmap threshold at 64 KiB with ``mallopt`` (every larger
  block is then mmapped and unmapped on free) and ``malloc_trim`` the heap. Persistent parameters
  and optimizer state are reported separately from parameter counts. Sampling can miss very short
  peaks, so treat CPU numbers as indications (±10-20%).
"""

from __future__ import annotations

import threading
import time

import torch

CPU_METHOD = ("peak RSS minus RSS before the step (psutil, sampled every 2 ms, glibc mmap threshold pinned "
              "at 64 KiB so freed tensors leave RSS); excludes resident params/optimizer state")
CUDA_METHOD = "torch.cuda.max_memory_allocated during the step minus allocated memory just before it"


class _RssSampler:
    """Context manager recording the peak RSS seen while it is active."""

    def __init__(self, interval_s: float = 0.002) -> None:
        import psutil

        self._proc = psutil.Process()
        self._interval = interval_s
        self._stop = threading.Event()
        self.start_rss = 0
        self.peak_rss = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_rss = max(self.peak_rss, self._proc.memory_info().rss)
            time.sleep(self._interval)

    def __enter__(self) -> _RssSampler:
        self.start_rss = self.peak_rss = self._proc.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_rss = max(self.peak_rss, self._proc.memory_info().rss)


def _make_rss_track_tensors() -> None:
    """Pin glibc's mmap threshold (M_MMAP_THRESHOLD = -3) and return freed heap pages to the OS."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if not name:
        return
    libc = ctypes.CDLL(name)
    if hasattr(libc, "mallopt"):
        libc.mallopt(-3, 64 * 1024)
    if hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def measure_step_memory(step_fn, device: torch.device) -> dict:
    """Run ``step_fn()`` once and return ``{"peak_step_bytes", "method", ...}`` for ``device``."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        step_fn()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
        return {"peak_step_bytes": peak - before, "peak_allocated_bytes": peak, "method": CUDA_METHOD}
    _make_rss_track_tensors()
    step_fn()  # one step under the new allocation policy, so lazily-created state already exists
    _make_rss_track_tensors()
    with _RssSampler() as sampler:
        step_fn()
    return {"peak_step_bytes": sampler.peak_rss - sampler.start_rss, "peak_rss_bytes": sampler.peak_rss,
            "method": CPU_METHOD}


def persistent_bytes(model: torch.nn.Module, precision: str) -> dict:
    """Parameters + gradient buffer + Adam state, from counts (what stays resident between steps).

    fp32: 4 (param) + 4 (grad) + 8 (Adam m, v). bf16/fp8: 2 (param) + 4 (fp32 grad buffer)
    + 4 (fp32 main param) + 8 (Adam) bytes per parameter, as megatron's mixed-precision optimizer keeps.
    """
    count = sum(p.numel() for p in model.parameters())
    per_param = 16 if precision == "fp32" else 18
    return {"num_parameters": count, "persistent_bytes": count * per_param}
