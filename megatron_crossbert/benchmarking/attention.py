"""``crossbert-bench attention``: one core-attention layer per backend, with and without document masks
and windows, at L = 512, 2048, 8192 (time, CPU time and peak memory); plus, with ``--corpus``, how much
unmasked attention crosses documents (``leakage``).

Each case runs in a fresh process (peak RSS is per process on a CPU): ``CoreAttention`` of one layer on
random ``[L, batch, heads, head_dim]`` queries/keys/values. Masks: none; the documents of a packed
sample (the corpus sample with the median document count, or synthetic documents of the corpus' mean
length); the same plus ModernBERT's window. megatron and sdpa run forward+backward everywhere; flex
runs compiled, forward+backward on a GPU and forward only on the CPU (torch has no CPU backward).
Times: median of ``repeats`` after a warm-up that builds the masks and compiles flex; the masks are
cached as in training, where all layers of a forward share them, and their build is timed apart
(once per forward, not per layer). CPU-seconds of the case process beside wall time: on a shared
machine wall time also counts other jobs.
"""

from __future__ import annotations

import json
import os
import platform as py_platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

from megatron_crossbert.config import ATTENTION_KERNELS

BACKENDS = ATTENTION_KERNELS
MASKS = ("none", "documents", "documents+window")


@dataclass
class AttentionBenchOptions:
    """What ``crossbert-bench attention`` runs (defaults: the CPU table of docs/results.md)."""

    seq_lengths: list[int] = field(default_factory=lambda: [512, 2048, 8192])
    backends: list[str] = field(default_factory=lambda: list(BACKENDS))
    masks: list[str] = field(default_factory=lambda: list(MASKS))
    window: int = 128
    """ModernBERT's local window (tokens) of the windowed cases."""
    heads: int = 2
    head_dim: int = 64
    batch: int = 1
    repeats: int = 3
    device: str = "auto"
    """cpu, cuda or auto (cuda when available); fp32 on the CPU, bf16 on the GPU."""
    flex_eager: bool = False
    """Run flex uncompiled (it then materialises the scores; a debugging aid, not a speed)."""
    corpus: list[str] = field(default_factory=list)
    """JSONL(.gz) globs: real documents for the masks, and the leakage table."""
    tokenizer: str | None = None
    """Tokenizer of the corpus (default: a 32k WordPiece trained on a sample of it)."""
    leakage_lengths: list[int] = field(default_factory=lambda: [512, 8192])
    leakage_samples: list[int] = field(default_factory=lambda: [2000, 250])
    seed: int = 1234

    def __post_init__(self) -> None:
        bad = [b for b in self.backends if b not in BACKENDS] + [m for m in self.masks if m not in MASKS]
        if bad:
            raise ValueError(f"unknown backends/masks {bad}; choose from {BACKENDS} and {MASKS}")
        if self.window < 2 or self.window % 2 or min(self.seq_lengths) < 2 or self.repeats < 1:
            raise ValueError("window must be even and >= 2, sequence lengths >= 2, repeats >= 1")
        if len(self.leakage_lengths) != len(self.leakage_samples):
            raise ValueError("leakage_lengths and leakage_samples must have the same length")


def _device(name: str):
    import torch

    return torch.device("cuda" if name == "auto" and torch.cuda.is_available() else
                        ("cpu" if name == "auto" else name))


def _segments(case: dict):
    """int64 ``[1, L]`` segments of the case (corpus median sample, or synthetic), and the document count."""
    import numpy as np
    import torch

    seq = case["seq_length"]
    if case["doc_lengths"]:
        from megatron_crossbert.benchmarking.leakage import median_sample_segments

        segments = median_sample_segments(np.load(case["doc_lengths"]), seq, case["seed"])
    else:
        from megatron_crossbert.benchmarking.batches import synthetic_segments

        segments = synthetic_segments(np.random.default_rng(case["seed"]), seq)
    return torch.from_numpy(segments.astype(np.int64))[None], int(segments.max()) + 1


def _attention(case: dict, device):
    """(CoreAttention module, coords or None, documents) of one case."""
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.transformer_config import TransformerConfig

    from megatron_crossbert.models.attention_masks import sample_coords
    from megatron_crossbert.models.core_attention import AttentionOptions, CoreAttention
    from megatron_crossbert.models.transformer_config import NO_CUDA_GRAPHS

    config = TransformerConfig(num_layers=1, hidden_size=case["heads"] * case["head_dim"],
                               num_attention_heads=case["heads"], attention_dropout=0.0,
                               use_cpu_initialization=True, **NO_CUDA_GRAPHS)
    half = case["window"] // 2 if case["mask"] == "documents+window" else 0
    options = AttentionOptions(case["backend"], (half,), compile_flex=not case["flex_eager"], flex_in_eval=True)
    module = CoreAttention(config, 1, AttnMaskType.padding, "self", options=options)
    if case["mask"] == "none":
        return module, None, 1
    segments, documents = _segments(case)
    return module, sample_coords(segments.expand(case["batch"], -1).to(device)), documents


def run_case(case: dict) -> dict:
    """One (L, mask, backend) case in this process; returns its row."""
    import torch

    from megatron_crossbert.platform import distributed as platform
    from megatron_crossbert.benchmarking.memory import measure_step_memory
    from megatron_crossbert.config import ParallelConfig

    device = _device(case["device"])
    platform.initialize(ParallelConfig(), 0)
    module, coords, documents = _attention(case, device)
    train = device.type == "cuda" or case["backend"] != "flex"
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    seq = case["seq_length"]
    q, k, v = (torch.randn(seq, case["batch"], case["heads"], case["head_dim"], device=device, dtype=dtype,
                           requires_grad=train) for _ in range(3))

    def step():
        with torch.set_grad_enabled(train):
            out = module(q, k, v, coords)
            if train:
                out.float().sum().backward()
        if device.type == "cuda":
            torch.cuda.synchronize()

    warmup = _timed(step)
    with torch.set_grad_enabled(train):  # as inside the forward (grad mode is part of compiled flex's guards)
        mask = None if coords is None else _timed(lambda: module.masks(coords.clone(), seq, seq, case["batch"]))
    times = [_timed(step) for _ in range(case["repeats"])]
    memory = measure_step_memory(step, device)
    return {**{k: case[k] for k in ("seq_length", "mask", "backend")}, "passes": "fwd+bwd" if train else "fwd",
            "documents": documents, "wall_ms": 1e3 * statistics.median(t[0] for t in times),
            "cpu_ms": 1e3 * statistics.median(t[1] for t in times),
            "mask_build_ms": None if mask is None else 1e3 * mask[0], "warmup_s": warmup[0],
            "peak_step_mib": memory["peak_step_bytes"] / 2**20, "memory_method": memory["method"]}


def _timed(fn) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def _case_process(case: dict) -> dict:
    """``run_case`` in a fresh interpreter (its own peak RSS); a failure becomes the row's ``error``."""
    argv = [sys.executable, "-m", "megatron_crossbert.benchmarking.attention", json.dumps(case)]
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        return json.loads(lines[-1])
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {**{k: case[k] for k in ("seq_length", "mask", "backend")}, "error": tail}


def _leakage(options: AttentionBenchOptions, work_dir: str) -> tuple[list[dict], str | None, dict]:
    """(leakage rows, path of the saved document lengths, corpus stats); nothing without a corpus."""
    if not options.corpus:
        return [], None, {}
    import numpy as np

    from megatron_crossbert.benchmarking.leakage import corpus_document_lengths, measure_leakage

    start = time.time()
    lengths = corpus_document_lengths(options.corpus, options.tokenizer, options.seed)
    stats = {"documents": int(lengths.size), "tokens": int(lengths.sum()), "tokenize_s": round(time.time() - start, 1),
             "doc_length_median": float(np.median(lengths)), "doc_length_mean": float(lengths.mean())}
    path = os.path.join(work_dir, "doc_lengths.npy")
    np.save(path, lengths)
    rows = [measure_leakage(lengths, seq, n, options.seed)
            for seq, n in zip(options.leakage_lengths, options.leakage_samples)]
    return rows, path, stats


def run_attention_bench(options: AttentionBenchOptions, work_dir: str) -> dict:
    """Every case (each in its own process), plus the leakage table with a corpus; the JSON report."""
    started, wall = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), time.time()
    leakage, doc_lengths, corpus = _leakage(options, work_dir)
    base = {k: v for k, v in asdict(options).items() if k in ("window", "heads", "head_dim", "batch", "repeats",
                                                              "device", "flex_eager", "seed")}
    rows = []
    for seq in options.seq_lengths:
        for mask in options.masks:
            for backend in options.backends:
                rows.append(_case_process({**base, "seq_length": seq, "mask": mask, "backend": backend,
                                           "doc_lengths": doc_lengths}))
                print(json.dumps(rows[-1]), flush=True)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    meta = {"benchmark": "attention", "options": asdict(options), "started_utc": started,
            "wall_s": round(time.time() - wall, 1), "cpu_s_process_tree": round(children.ru_utime + children.ru_stime
                                                                              + time.process_time(), 1),
            "cpu_count": os.cpu_count(), "machine": py_platform.processor() or py_platform.machine(),
            "documents": "corpus median sample" if doc_lengths else "synthetic (geometric, mean 67 tokens)"}
    return {"meta": {**meta, "corpus": corpus}, "results": rows, "leakage": leakage}


ATTENTION_HEADERS = ["L", "mask", "backend", "passes", "wall ms", "CPU ms", "peak step MiB", "mask build ms"]


def attention_rows(results: list[dict]) -> list[list[str]]:
    from megatron_crossbert.benchmarking.report import fmt

    rows = []
    for r in results:
        label = r["mask"] if r["mask"] == "none" or "documents" not in r else f"{r['mask']} ({r['documents']} docs)"
        if "error" in r:
            rows.append([r["seq_length"], label, r["backend"], f"FAILED: {r['error']}", "—", "—", "—", "—"])
            continue
        rows.append([r["seq_length"], label, r["backend"], r["passes"], fmt(r["wall_ms"], 1), fmt(r["cpu_ms"], 1),
                     fmt(r["peak_step_mib"], 1), fmt(r["mask_build_ms"], 1)])
    return rows


def attention_markdown(report: dict) -> str:
    """The attention table, and the leakage table when the report has one."""
    from megatron_crossbert.benchmarking.leakage import LEAKAGE_HEADERS, leakage_rows
    from megatron_crossbert.benchmarking.report import markdown_table

    text = markdown_table(ATTENTION_HEADERS, attention_rows(report["results"]))
    if report.get("leakage"):
        text += "\n\nWithout document masks (" + str(report["meta"]["corpus"].get("documents")) + " documents):\n\n"
        text += markdown_table(LEAKAGE_HEADERS, leakage_rows(report["leakage"]))
    return text


if __name__ == "__main__":
    print(json.dumps(run_case(json.loads(sys.argv[1]))))
