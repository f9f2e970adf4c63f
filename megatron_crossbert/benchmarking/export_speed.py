"""Inference speed of the HF exports side by side (``crossbert-bench export-speed``).

What users of an export pay for: sentences/s of stock ``AutoModel`` forward passes at s=128 and s=512,
for every registered format that represents the model exactly and every attention backend its class
supports (``sdpa``/``eager``, plus ``flash_attention_2`` on a GPU when ``flash_attn`` is installed).
All rows come from real exports of randomly initialised native CrossBERT checkpoints of one shape, one
checkpoint per encoder family the requested formats serve (``arch.EncoderFamily.hf_formats``: the
classic one for ``xlmr-xl``/``megatron-bert``, the modern one for ``modernbert``). Speed-ups are relative to the
eager MegatronBert row (the reference, today's eager-only export); each row's max abs diff is to the
reference row of its own checkpoint (``REFERENCE`` when that checkpoint exports to it, else its
format's eager row), since rows of one checkpoint compute the same function.

Method: half of each batch is padded to half length (a realistic retrieval batch). Models are timed
round-robin within a sequence length (order rotating per round) so machine-load drift hits every
row alike; the median round is reported. On a CPU shared with other jobs the default clock is this
process's CPU time (as in ``throughput.py``); both clocks are in the JSON.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from megatron_crossbert.benchmarking.choices import EXPORT_DEVICES, GPU_DTYPES
from megatron_crossbert.benchmarking.throughput import resolve_clock

REFERENCE = ("megatron-bert", "eager")

"""The row every other row is compared with (today's eager-only export)."""


@dataclass
class ExportSpeedOptions:
    """Model shape and timing plan; defaults are BERT-small-like (two checkpoints: classic and modern)."""

    hidden_size: int = 512
    """Encoder width (BERT-small: 512)."""
    num_layers: int = 4
    """Encoder depth (BERT-small: 4)."""
    num_attention_heads: int = 8
    """Heads (head_dim 64, as in BERT)."""
    vocab_size: int = 8192
    """Synthetic WordPiece vocabulary trained for the export's tokenizer."""
    seq_lengths: list[int] = field(default_factory=lambda: [128, 512])
    """Padded batch lengths to time (the position table covers the largest)."""
    batch_size: int = 8
    """Sentences per forward pass; half are padded to half length."""
    warmup: int = 1
    """Untimed rounds per sequence length."""
    repeats: int = 3
    """Timed rounds per sequence length (median reported)."""
    formats: list[str] = field(default_factory=list)
    """Format names to include (empty: every registered format)."""
    device: str = "auto"
    """'cpu', 'cuda' or 'auto' (cuda when available)."""
    gpu_dtype: str = "bfloat16"
    """Dtype on GPU (FlashAttention needs 16-bit); the CPU always runs fp32."""
    clock: str = "auto"
    """'wall', 'cpu' or 'auto' (cpu on a CPU device, wall on GPU)."""
    work_dir: str | None = None
    """Where the checkpoint and exports go (default: a temporary directory)."""
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.seq_lengths, default=0) < 2 or self.batch_size < 2:
            raise ValueError("seq_lengths must be >= 2 and batch_size >= 2 (half the batch is padded)")
        if self.repeats < 1 or self.warmup < 0:
            raise ValueError("repeats must be >= 1 and warmup >= 0")
        if self.device not in EXPORT_DEVICES:
            raise ValueError(f"device must be one of {', '.join(EXPORT_DEVICES)}, got {self.device!r}")
        if self.gpu_dtype not in GPU_DTYPES:
            raise ValueError(f"gpu_dtype must be one of {', '.join(GPU_DTYPES)}, got {self.gpu_dtype!r}")


def _device(options: ExportSpeedOptions) -> torch.device:
    if options.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(options.device)


def _tokenizer(work: Path, vocab_size: int, seed: int) -> Path:
    """A WordPiece tokenizer trained on synthetic words (the timed inputs are random ids anyway)."""
    from megatron_crossbert.data.tokenizers.training import train_tokenizer

    gen = torch.Generator().manual_seed(seed)
    corpus = work / "synthetic.jsonl"
    with corpus.open("w") as handle:
        for _ in range(2000):
            words = torch.randint(0, 4 * vocab_size, (32,), generator=gen).tolist()
            handle.write(json.dumps({"text": " ".join(f"w{w}" for w in words)}) + "\n")
    train_tokenizer([str(corpus)], work / "tokenizer", model_type="wordpiece", vocab_size=vocab_size)
    return work / "tokenizer"


def _checkpoint(work: Path, options: ExportSpeedOptions, tokenizer: Path, encoder: str) -> Path:
    """A randomly initialised CrossBERT on ``encoder`` (TP=1) saved as a model-only checkpoint."""
    from transformers import AutoTokenizer

    from megatron_crossbert.checkpoint.save import save_model_only
    from megatron_crossbert.config import DataConfig, ModelConfig, RunConfig
    from megatron_crossbert.convert.native import build_single_process_model, tp1_parallel_state

    size = len(AutoTokenizer.from_pretrained(str(tokenizer)))
    model = ModelConfig(arch="crossbert", encoder=encoder, vocab_size=size, hidden_size=options.hidden_size,
                        num_layers=options.num_layers, num_attention_heads=options.num_attention_heads,
                        max_position_embeddings=max(options.seq_lengths), decoder_num_layers=1,
                        hidden_dropout=0.0, attention_dropout=0.0, transformer_impl="local")
    run_cfg = RunConfig(model=model, data=DataConfig(seq_length=max(options.seq_lengths), tokenizer=str(tokenizer)))
    with tp1_parallel_state(options.seed):
        save_model_only(build_single_process_model(run_cfg), run_cfg, work / f"checkpoint_{encoder}")
    return work / f"checkpoint_{encoder}"


def _backends(device: torch.device) -> list[str]:
    found = ["sdpa", "eager"]
    if device.type == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        found.append("flash_attention_2")
    return found


def _exports(work: Path, tokenizer: Path, options: ExportSpeedOptions) -> tuple[list[dict], list[dict]]:
    """One checkpoint per encoder family the requested formats need, exported to each of its formats;
    returns (exports, skipped formats with their reasons)."""
    from megatron_crossbert.arch import ENCODERS
    from megatron_crossbert.convert import export_to_hf
    from megatron_crossbert.convert.formats import get_format
    from megatron_crossbert.convert.native import open_export_source

    wanted = {get_format(name).name for name in options.formats}  # an unknown name fails before any work
    exports, skipped = [], []
    for encoder, family in ENCODERS.items():
        names = [name for name in family.hf_formats if not wanted or name in wanted]
        source = open_export_source(_checkpoint(work, options, tokenizer, encoder)) if names else None
        for fmt in map(get_format, names):
            reasons = fmt.unsupported(source.saved.model)
            if reasons:
                skipped.append({"format": fmt.name, "reason": "; ".join(reasons)})
                continue
            out = export_to_hf(source, work / f"hf_{fmt.name}", format_name=fmt.name, force=True)
            exports.append({"format": fmt.name, "hf_class": fmt.base_class, "dir": out, "encoder": encoder,
                            "backends": list(fmt.attention_backends)})
    return exports, skipped


def _batch(seq_length: int, options: ExportSpeedOptions, vocab: int, pad_id: int, device) -> dict:
    """Random non-pad ids (a real pad id would shift XLM-R's positions); the second half of the rows
    is right-padded to half length."""
    gen = torch.Generator().manual_seed(options.seed + seq_length)
    ids = torch.randint(0, vocab, (options.batch_size, seq_length), generator=gen)
    ids[ids == pad_id] = (pad_id + 1) % vocab
    mask = torch.ones_like(ids)
    mask[options.batch_size // 2:, seq_length // 2:] = 0
    return {"input_ids": ids.masked_fill(mask == 0, pad_id).to(device), "attention_mask": mask.to(device)}


def _load(row: dict, device: torch.device, dtype: torch.dtype):
    from transformers import AutoModel

    return AutoModel.from_pretrained(row["dir"], attn_implementation=row["backend"],
                                     dtype=dtype).to(device).eval()


def _timed(model, batch: dict, device: torch.device) -> tuple[float, float, torch.Tensor]:
    """(wall s, process CPU s, last_hidden_state) of one forward pass."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    wall, cpu = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        out = model(**batch).last_hidden_state
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - wall, time.process_time() - cpu, out


def _time_length(rows: list[dict], models: list, batch: dict, options: ExportSpeedOptions,
                 device: torch.device) -> list[dict]:
    """Round-robin timing of every model on one batch; returns per-row clocks and outputs."""
    clocks = [{"wall": [], "cpu": []} for _ in rows]
    outputs: list[torch.Tensor | None] = [None] * len(rows)
    for round_index in range(options.warmup + options.repeats):
        shift = round_index % len(rows)
        for i in list(range(len(rows)))[shift:] + list(range(len(rows)))[:shift]:
            wall, cpu, outputs[i] = _timed(models[i], batch, device)
            if round_index >= options.warmup:
                clocks[i]["wall"].append(wall)
                clocks[i]["cpu"].append(cpu)
    return [{"clocks": c, "output": o} for c, o in zip(clocks, outputs)]


def _reference_indices(rows: list[dict]) -> list[int | None]:
    """Per row, the index of the row its output is compared with: the same checkpoint's ``REFERENCE``
    row when there is one, else the eager row of its own format (None: no eager row to compare with)."""
    names = [(row["format"], row["backend"]) for row in rows]
    encoder_ref = {row["encoder"]: i for i, row in enumerate(rows) if names[i] == REFERENCE}
    own_eager = {row["format"]: i for i, row in enumerate(rows) if row["backend"] == "eager"}
    return [encoder_ref.get(row["encoder"], own_eager.get(row["format"])) for row in rows]


def _results(rows: list[dict], timed: list[dict], seq_length: int, batch: dict, clock: str,
             options: ExportSpeedOptions) -> list[dict]:
    keep = batch["attention_mask"].bool()
    names = [(row["format"], row["backend"]) for row in rows]
    results = []
    for row, t, ref in zip(rows, timed, _reference_indices(rows)):
        seconds = statistics.median(t["clocks"][clock])
        diff = None if ref is None else (t["output"].float() - timed[ref]["output"].float())[keep].abs().max().item()
        results.append({"format": row["format"], "hf_class": row["hf_class"], "encoder": row["encoder"],
                        "backend": row["backend"], "seq_length": seq_length, "batch_size": options.batch_size,
                        "seconds_per_batch": seconds, "sentences_per_s": options.batch_size / seconds,
                        "wall_s": t["clocks"]["wall"], "cpu_s": t["clocks"]["cpu"],
                        "max_abs_diff_vs_reference": diff,
                        "diff_reference": None if ref is None else "/".join(names[ref])})
    if REFERENCE in names:
        ref_rate = results[names.index(REFERENCE)]["sentences_per_s"]
        for result in results:
            result["speedup_vs_reference"] = result["sentences_per_s"] / ref_rate
    return results


def run_export_speed(options: ExportSpeedOptions) -> dict:
    """Build, export and time; returns the JSON-ready report."""
    device = _device(options)
    dtype = getattr(torch, options.gpu_dtype) if device.type == "cuda" else torch.float32
    clock = resolve_clock(options.clock, device)
    with tempfile.TemporaryDirectory(prefix="export_speed_") as tmp:
        work = Path(options.work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        tokenizer = _tokenizer(work, options.vocab_size, options.seed)
        exports, skipped = _exports(work, tokenizer, options)
        rows = [{**export, "backend": backend} for export in exports
                for backend in _backends(device) if backend in export["backends"]]
        models = [_load(row, device, dtype) for row in rows]
        config = models[0].config
        results = []
        for seq_length in options.seq_lengths:
            batch = _batch(seq_length, options, config.vocab_size, config.pad_token_id, device)
            timed = _time_length(rows, models, batch, options, device)
            results += _results(rows, timed, seq_length, batch, clock, options)
    meta = {"device": device.type, "device_name": _device_name(device), "dtype": str(dtype).replace("torch.", ""),
            "torch_threads": torch.get_num_threads(), "clock": clock, "torch": torch.__version__,
            "options": asdict(options), "skipped": skipped, "reference": "/".join(REFERENCE)}
    return {"meta": meta, "results": results}


def _device_name(device: torch.device) -> str:
    import platform

    return torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or "cpu")


def export_speed_markdown(report: dict) -> str:
    """The table users read: one row per (format, backend, sequence length)."""
    from megatron_crossbert.benchmarking.report import fmt, markdown_table

    meta, opts = report["meta"], report["meta"]["options"]
    header = (f"HF export inference speed on {meta['device']} ({meta['device_name']}, {meta['torch_threads']} "
              f"threads, {meta['dtype']}, clock: {meta['clock']}); encoder h={opts['hidden_size']}, "
              f"layers={opts['num_layers']}, heads={opts['num_attention_heads']}, batch {opts['batch_size']} "
              f"(half padded to half length), median of {opts['repeats']} round-robin rounds.")
    rows = [[r["format"], r["hf_class"], r["encoder"], r["backend"], r["seq_length"], fmt(r["sentences_per_s"], 1),
             fmt(r["seconds_per_batch"], 1, 1e3), fmt(r.get("speedup_vs_reference"), 2, suffix="x"),
             "—" if r["max_abs_diff_vs_reference"] is None
             else f"{r['max_abs_diff_vs_reference']:.2g} ({r['diff_reference']})"]
            for r in report["results"]]
    table = markdown_table(["format", "HF class", "encoder", "attention", "s", "sentences/s", "ms/batch",
                            f"× {meta['reference']}", "max abs diff (vs)"], rows)
    skipped = "".join(f"\nSkipped {s['format']}: {s['reason']}" for s in meta["skipped"])
    return f"{header}\n\n{table}{skipped}"
