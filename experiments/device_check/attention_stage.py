"""Stage ``attention`` of the device check: FlexAttention against SDPA at L=8192, and the MFU SDPA buys.

Cheapest first, each row kept the moment it is measured (``stage_io.keep_row``):

1. MFU: bf16 training steps of modern CrossBERT and its MLM baselines at BERT-base shape, L=512, with
   SDPA and with megatron-core's unfused attention (``model.attention_backend``), no document masks, so
   the difference is the attention kernel alone and nothing compiles.
2. Kernels: one core-attention layer (``CoreAttention``, 12 heads x 64, bf16) on the documents of packed
   samples (geometric lengths of the shared corpus' mean): at L=8192 (~120 documents) with and without
   ModernBERT's 128-token window, and at BERT-base's L=512 x 32 samples, the shape where classic configs
   with attention dropout run SDPA with a dense mask. Compiled flex (block mask) against SDPA (dense bool
   mask), forward+backward tokens/s and peak memory, and flex's output and q/k/v gradients against SDPA's
   (the gradients the CPU cannot check: torch has no FlexAttention backward there).

``--toy`` runs both on the CPU at toy sizes (flex forward only and uncompiled; no gradients to compare).
"""

from __future__ import annotations

import time
from pathlib import Path

from .program import DeviceCheckConfig
from .stage_io import keep_row

LONG = dict(seq_length=8192, batch=1, heads=12, head_dim=64, repeats=5)
BASE = dict(seq_length=512, batch=32, heads=12, head_dim=64, repeats=5)
TOY_LONG = dict(seq_length=256, batch=1, heads=2, head_dim=16, repeats=1)
TOY_BASE = dict(seq_length=64, batch=2, heads=2, head_dim=16, repeats=1)
WINDOW, TOY_WINDOW = 128, 32
"""ModernBERT's local window (tokens), and the toy run's."""


def kernel_rows(toy: bool) -> list[tuple[str, dict, int]]:
    """(mask, sizes, half window) of each kernel row, in the order measured; each shape is one flex compile."""
    long, base, window = (TOY_LONG, TOY_BASE, TOY_WINDOW) if toy else (LONG, BASE, WINDOW)
    return [("documents", long, 0), ("documents+window", long, window // 2), ("documents", base, 0)]


MFU_CASE = "crossbert-modern r=0.5 compl"
"""The throughput case whose MFU is compared (the MLM baselines always run beside it as references)."""
GRAD_RTOL = 2e-2
"""Max ||flex - sdpa|| / ||sdpa|| of output and gradients in bf16 (fp32 accumulation differs per kernel)."""


def _inputs(sizes: dict, device, dtype, train: bool):
    import numpy as np
    import torch

    from megatron_crossbert.benchmarking.batches import synthetic_segments
    from megatron_crossbert.models.attention_masks import sample_coords

    gen, rng = torch.Generator(device="cpu").manual_seed(0), np.random.default_rng(0)
    shape = (sizes["seq_length"], sizes["batch"], sizes["heads"], sizes["head_dim"])
    qkv = [torch.randn(shape, generator=gen).to(device=device, dtype=dtype).requires_grad_(train) for _ in range(3)]
    segments = np.stack([synthetic_segments(rng, sizes["seq_length"]) for _ in range(sizes["batch"])]).astype(np.int64)
    documents = int((segments.max(1) + 1).sum())
    return qkv, sample_coords(torch.from_numpy(segments).to(device)), documents


def _module(backend: str, half: int, sizes: dict, toy: bool):
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.transformer_config import TransformerConfig

    from megatron_crossbert.models.core_attention import AttentionOptions, CoreAttention
    from megatron_crossbert.models.transformer_config import NO_CUDA_GRAPHS

    config = TransformerConfig(num_layers=1, hidden_size=sizes["heads"] * sizes["head_dim"],
                               num_attention_heads=sizes["heads"], attention_dropout=0.0, use_cpu_initialization=True,
                               **NO_CUDA_GRAPHS)
    options = AttentionOptions(backend, (half,), compile_flex=False if toy else None, flex_in_eval=True)
    return CoreAttention(config, 1, AttnMaskType.padding, "self", options=options)


def _run(module, qkv, coords, train: bool, device):
    """(output, [q, k, v grads] or None) of one call; the weighted sum makes every gradient entry count."""
    import torch

    for tensor in qkv:
        tensor.grad = None
    with torch.set_grad_enabled(train):
        out = module(*qkv, coords)
        if train:
            (out.float() * torch.linspace(-1, 1, out.numel(), device=device).view_as(out)).sum().backward()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return out.detach(), ([t.grad.detach().clone() for t in qkv] if train else None)


def _timing(module, qkv, coords, train: bool, device, repeats: int) -> dict:
    from megatron_crossbert.benchmarking.memory import measure_step_memory

    start = time.perf_counter()
    _run(module, qkv, coords, train, device)                   # compile (flex) and masks
    first = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(repeats):
        _run(module, qkv, coords, train, device)
    step = (time.perf_counter() - start) / repeats
    memory = measure_step_memory(lambda: _run(module, qkv, coords, train, device), device)
    return {"first_call_s": first, "step_ms": 1e3 * step, "tokens_per_s": qkv[0].shape[0] * qkv[0].shape[1] / step,
            "peak_step_mib": memory["peak_step_bytes"] / 2**20}


def _relative(a, b) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12))


def kernel_row(mask: str, sizes: dict, half: int, toy: bool) -> dict:
    """One mask and shape: flex and sdpa timings and memory, and flex's relative error against sdpa."""
    import torch

    from megatron_crossbert.platform import distributed as platform

    device = platform.device()
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    train = device.type == "cuda"                                # flex has no CPU backward
    qkv, coords, documents = _inputs(sizes, device, dtype, train)
    row = {"mask": mask, "seq_length": sizes["seq_length"], "batch": sizes["batch"], "documents": documents,
           "dtype": str(dtype), "passes": "fwd+bwd" if train else "fwd"}
    outputs = {}
    for backend in ("flex", "sdpa"):
        module = _module(backend, half, sizes, toy)
        outputs[backend] = _run(module, qkv, coords, train, device)
        row[backend] = _timing(module, qkv, coords, train, device, sizes["repeats"])
    (flex_out, flex_grads), (sdpa_out, sdpa_grads) = outputs["flex"], outputs["sdpa"]
    row["output_rel_err"] = _relative(flex_out, sdpa_out)
    row["grad_rel_err"] = max(map(_relative, flex_grads, sdpa_grads)) if train else None
    row["flex_speedup"] = row["flex"]["tokens_per_s"] / row["sdpa"]["tokens_per_s"]
    row["ok"] = row["output_rel_err"] <= GRAD_RTOL and (row["grad_rel_err"] or 0.0) <= GRAD_RTOL
    return row


def mfu_run(backend: str, toy: bool) -> dict:
    """Throughput report of the MFU case and the MLM baselines with attention ``backend``, no document masks."""
    from megatron_crossbert.benchmarking.throughput import ThroughputOptions, run_throughput

    options = ThroughputOptions(size="tiny" if toy else "base", precision="fp32" if toy else "bf16",
                                steps=1 if toy else 4, warmup=0 if toy else 2, only=[MFU_CASE],
                                num_layers=1 if toy else None, peak_tflops=None, clock="wall",
                                attention_backend=backend, document_mask=False)
    report = run_throughput(options)
    return {"attention_backend": backend, "results": [
        {k: r.get(k) for k in ("name", "samples_per_s", "achieved_tflops", "mfu", "peak_step_bytes")}
        for r in report["results"]]}


def run_attention(config: DeviceCheckConfig) -> dict:
    """The stage: the MFU runs (nothing compiles), then the kernel rows; every row kept as it is measured;
    ``ok`` when flex matches SDPA in every kernel row."""
    from megatron_crossbert.platform import distributed as platform
    from megatron_crossbert.config import ParallelConfig

    platform.initialize(ParallelConfig(), 0)
    work, result = Path(config.work_dir), {"mfu": [], "kernels": []}
    for backend in ("sdpa", "megatron"):
        keep_row(work, "attention", result, "mfu", mfu_run(backend, config.toy))
    for mask, sizes, half in kernel_rows(config.toy):
        keep_row(work, "attention", result, "kernels", kernel_row(mask, sizes, half, config.toy))
    return {**result, "ok": all(row["ok"] for row in result["kernels"])}
