"""The value sets of the benchmarks' options, in one torch-free place.

Each options dataclass (``ThroughputOptions``, ``ExportSpeedOptions``, ``GpuCheckOptions``)
validates against these and ``crossbert-bench`` offers them as ``choices``, so a set is written
once. Torch-free, so building the parser (and the torch-free ``preprocess`` harness) imports no
torch.
"""

CLOCKS = ("auto", "wall", "cpu")
"""Step timers: 'wall', 'cpu' (process CPU time, robust to other jobs on a shared CPU) or 'auto'
(cpu on a CPU device, wall on GPU)."""
EXPORT_DEVICES = ("auto", "cpu", "cuda")
"""Where ``export-speed`` runs the HF models ('auto': cuda when available)."""
GPU_DTYPES = ("bfloat16", "float16", "float32")
"""``export-speed``'s dtype on the GPU (torch dtype names; FlashAttention needs 16-bit)."""
GPU_CHECK_PRECISIONS = ("bf16", "fp32")
"""``gpu-check``'s main-run precisions (``training.precision`` values; fp32 only for the CPU dry run).
FP8 runs beside them when Transformer Engine imports."""
