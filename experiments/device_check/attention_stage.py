"""Stage ``attention`` of the device check: FlexAttention against SDPA at L=8192, and the MFU SDPA buys.

1. Kernels: one core-attention layer (``CoreAttention``, 12 heads x 64, bf16) at L=8192 on the
   documents of a packed sample (geometric lengths of the shared corpus' mean, ~120 documents), with
   and without ModernBERT's 128-token window: compiled flex (block mask) against SDPA (dense bool mask),
   forward+backward tokens/s and peak memory, and flex's output and q/k/v gradients against SDPA's
   (the gradients the CPU cannot check: torch has no FlexAttention backward there).
2. MFU: bf16 training steps of modern CrossBERT and its MLM baseline at BERT-base shape, L=512, with
   SDPA and with megatron-core's unfused attention (``model.attention_backend``), no document masks, so
   the difference is the attention kernel alone.

``--toy`` runs both on the CPU at toy sizes (flex forward only and uncompiled; no gradients to compare).
"""

from __future__ import annotations

import time

from .plan import DeviceCheckConfig

KERNEL = dict(seq_length=8192, heads=12, head_dim=64, window=128, repeats=5)
TOY_KERNEL = dict(seq_length=256, heads=2, head_dim=16, window=32, repeats=1)
MFU_CASE = "crossbert-modern r=0.5 compl"
"""The throughput case whose MFU is compared (the MLM baselines always run beside it as references)."""
GRAD_RTOL = 2e-2
"""Max ||flex - sdpa|| / ||sdpa|| of output and gradients in bf16 (fp32 accumulation differs per kernel)."""


def _inputs(sizes: dict, device, dtype, train: bool):
    import numpy as np
    import torch

    from megatron_crossbert.benchmarking.batches import synthetic_segments
    from megatron_crossbert.models.attention_masks import sample_coords

    gen = torch.Generator(device="cpu").manual_seed(0)
    shape = (sizes["seq_length"], 1, sizes["heads"], sizes["head_dim"])
    qkv = [torch.randn(shape, generator=gen).to(device=device, dtype=dtype).requires_grad_(train) for _ in range(3)]
    segments = synthetic_segments(np.random.default_rng(0), sizes["seq_length"]).astype(np.int64)
    return qkv, sample_coords(torch.from_numpy(segments)[None].to(device)), int(segments.max()) + 1


def _module(backend: str, half: int, sizes: dict, toy: bool):
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.transformer_config import TransformerConfig

    from megatron_crossbert.models.core_attention import AttentionOptions, CoreAttention
    from megatron_crossbert.models.transformer_config import NO_CUDA_GRAPHS

    config = TransformerConfig(num_layers=1, hidden_size=sizes["heads"] * sizes["head_dim"],
                               num_attention_heads=sizes["heads"], attention_dropout=0.0, use_cpu_initialization=True,
                               **NO_CUDA_GRAPHS)
    options = AttentionOptions(backend, (half,), compile_flex=False if toy else None, flex_without_grad=True)
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
    return {"first_call_s": first, "step_ms": 1e3 * step, "tokens_per_s": qkv[0].shape[0] / step,
            "peak_step_mib": memory["peak_step_bytes"] / 2**20}


def _relative(a, b) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12))


def kernel_comparison(toy: bool) -> list[dict]:
    """Per mask: flex and sdpa timings and memory, and flex's relative error against sdpa."""
    import torch

    from megatron_crossbert import platform
    from megatron_crossbert.config import ParallelConfig

    platform.initialize(ParallelConfig(), 0)
    device = platform.device()
    sizes = TOY_KERNEL if toy else KERNEL
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    train = device.type == "cuda"                                # flex has no CPU backward
    rows = []
    for mask, half in (("documents", 0), ("documents+window", sizes["window"] // 2)):
        qkv, coords, documents = _inputs(sizes, device, dtype, train)
        row = {"mask": mask, "seq_length": sizes["seq_length"], "documents": documents, "dtype": str(dtype),
               "passes": "fwd+bwd" if train else "fwd"}
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
        rows.append(row)
        print(f"attention kernels {row}", flush=True)
    return rows


def mfu_comparison(toy: bool) -> list[dict]:
    """Throughput reports of the same models with SDPA and with megatron's unfused attention."""
    from megatron_crossbert.benchmarking.throughput import ThroughputOptions, run_throughput

    runs = []
    for backend in ("sdpa", "megatron"):
        options = ThroughputOptions(size="tiny" if toy else "base", precision="fp32" if toy else "bf16",
                                    steps=1 if toy else 4, warmup=0 if toy else 2, only=[MFU_CASE],
                                    num_layers=1 if toy else None,
                                    peak_tflops=None, clock="wall",
                                    attention_backend=backend, document_mask=False)
        report = run_throughput(options)
        runs.append({"attention_backend": backend, "results": [
            {k: r.get(k) for k in ("name", "samples_per_s", "achieved_tflops", "mfu", "peak_step_bytes")}
            for r in report["results"]]})
        print(f"throughput attention_backend={backend}: {runs[-1]['results']}", flush=True)
    return runs


def run_attention(config: DeviceCheckConfig) -> dict:
    """The stage: ``ok`` when flex matches SDPA and every throughput run finished."""
    kernels = kernel_comparison(config.toy)
    mfu = mfu_comparison(config.toy)
    return {"kernels": kernels, "mfu": mfu, "ok": all(row["ok"] for row in kernels)}
