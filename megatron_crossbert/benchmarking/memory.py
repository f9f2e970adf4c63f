"""Peak memory of one training step, measured in a way that works while models are interleaved.

* CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` around the model's
  steps. This is the allocator's true peak (parameters, grads, optimizer state and activations of
  this model, plus whatever other models still hold: all models stay resident, so the number is
  reported both raw and minus the memory allocated just before the step).
* CPU: there is no allocator peak counter, and tracemalloc does not see torch's allocations. A
  background thread samples the process RSS (psutil) every ~2 ms during the step; the reported
  value is peak RSS minus the RSS just before the step, i.e. the transient memory of the step
  (activations, gradients not yet folded into buffers, temporary GEMM workspaces). For RSS to
  follow live tensors, glibc must not recycle freed blocks inside its heap: while measuring (after
  all timing is done) we pin glibc's mmap threshold at 64 KiB with ``mallopt`` (every larger
  block is then mmapped and unmapped on free) and ``malloc_trim`` the heap; afterwards the heap goes
  back to glibc's settled policy, so the rest of the process does not fault in every block afresh
  (that costs a training step ten times its system time). Persistent parameters
  and optimizer state are reported separately from parameter counts. Sampling can miss very short
  peaks, so treat CPU numbers as indications (±10-20%).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

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


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
"""glibc's ``mallopt`` parameters."""

PINNED_MMAP_THRESHOLD = 64 * 1024
"""While measuring: every block over this is mmapped and unmapped on free, so RSS follows live tensors."""

SETTLED_MMAP_THRESHOLD = 32 * 1024 * 1024
"""After measuring: glibc's ceiling of its dynamic mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX), where
the default policy settles once a process has freed large blocks; its trim threshold is then twice that. Any
``mallopt`` call ends the dynamic policy for good, so this is the nearest thing to handing it back."""


def _libc():
    """glibc through ctypes, or None where there is no C library with ``mallopt`` (then nothing is pinned)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    return libc if libc is not None and hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


@contextmanager
def rss_tracks_tensors():
    """Pin glibc's mmap threshold for the block (``PINNED_MMAP_THRESHOLD``) and return freed heap pages to the
    OS, then settle it again (``SETTLED_MMAP_THRESHOLD``): pinned, every later allocation over 64 KiB of this
    process (a test worker, a benchmark going on to its next rows) would be a fresh mmap and page faults."""
    libc = _libc()
    if libc is None:
        yield lambda: None
        return
    libc.mallopt(M_MMAP_THRESHOLD, PINNED_MMAP_THRESHOLD)
    libc.malloc_trim(0)
    try:
        yield lambda: libc.malloc_trim(0)
    finally:
        libc.mallopt(M_MMAP_THRESHOLD, SETTLED_MMAP_THRESHOLD)
        libc.mallopt(M_TRIM_THRESHOLD, 2 * SETTLED_MMAP_THRESHOLD)


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
    with rss_tracks_tensors() as trim:
        step_fn()  # one step under the pinned allocation policy, so lazily-created state already exists
        trim()
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
