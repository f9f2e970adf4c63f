"""``crossbert-demo``: the whole pipeline on the CPU in minutes, with no network.

Stages (each prints a numbered header; the tools underneath show their own progress):
 1. corpus     - the embedded docstring corpus (see docstring_corpus.py) or ``--corpus`` JSONL;
                 every 10th record is held out for the probe task and never pretrained on
 2. tokenizer  - sentencepiece unigram with [CLS]/[SEP]/[MASK]/[PAD]/[UNK]/[EOD] (bit-reproducible;
                 the HF WordPiece trainer breaks frequency ties arbitrarily)
 3. preprocess - Megatron .bin/.idx
 4. init ckpt  - the untrained model, saved for the probe comparison
 5. pretrain   - a tiny CrossBERT (complementary masking, r=0.5), or ``--arch``/``--encoder``
 6. export     - Hugging Face dir in the encoder's default format (AutoModel / SentenceTransformer ready)
 7. probe      - frozen linear probe on the held-out task: trained vs untrained encoder vs chance

The probe task is "which package wrote this docstring?" for the default corpus (labels from the
record's ``source``), or, for a corpus without labels, "is this paragraph's word order original or
shuffled?" - both need nothing but the corpus itself.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from megatron_crossbert.arch import get_arch
from megatron_crossbert.config import (CheckpointConfig, DataConfig, MaskingConfig, ModelConfig, RunConfig,
                                       TrainingConfig)

HOLDOUT_EVERY = 10


@dataclass
class DemoOptions:
    """Sizes chosen so the default run takes about 5-6 minutes on 2 CPU cores.

    1200 steps is roughly where this model leaves the MLM unigram plateau (loss ~6.3) far enough for
    the frozen probe to beat the untrained encoder; 300 steps did not.
    """

    out_dir: str = "outputs/demo"
    arch: str = "crossbert"
    """Architecture (``arch.REGISTRY``)."""
    encoder: str = "classic"
    """Encoder family (``arch.ENCODERS``); the HF export needs a registered format for it."""
    corpus: str | None = None
    corpus_bytes: int = 3_000_000
    vocab_size: int = 8000
    seq_length: int = 128
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    decoder_layers: int = 1
    train_iters: int = 1200
    micro_batch_size: int = 16
    lr: float = 1e-3
    probe_train: int = 600
    probe_test: int = 300
    seed: int = 1234
    force: bool = False
    stages_done: list[str] = field(default_factory=list)


def _stage(number: int, name: str, detail: str) -> float:
    print(f"\n[demo {number}/7] {name}: {detail}", flush=True)
    return time.perf_counter()


def _read_records(path: Path) -> list[dict]:
    from megatron_crossbert.evaluation.tasks import read_jsonl_rows

    return [r for r in read_jsonl_rows(path)
            if isinstance(r, dict) and isinstance(r.get("text"), str) and r["text"].strip()]


def prepare_corpus(opts: DemoOptions, out: Path) -> tuple[Path, list[dict]]:
    """Write the pretraining JSONL (without the held-out records); return it and the held-out records."""
    from megatron_crossbert.docstring_corpus import write_corpus

    source = Path(opts.corpus) if opts.corpus else out / "corpus" / "docstrings.jsonl"
    if opts.corpus is None:
        counts = write_corpus(source, max_bytes=opts.corpus_bytes)
        print("  docstring corpus:", ", ".join(f"{k} {v['docs']} docs" for k, v in counts.items()))
    records = _read_records(source)
    if len(records) < 50:
        raise ValueError(f"{source}: only {len(records)} usable records with a 'text' field; need at least 50")
    pretrain = [r for i, r in enumerate(records) if i % HOLDOUT_EVERY]
    heldout = [r for i, r in enumerate(records) if not i % HOLDOUT_EVERY]
    path = out / "corpus" / "pretrain.jsonl"
    path.write_text("".join(json.dumps({"text": r["text"]}) + "\n" for r in pretrain))
    print(f"  {len(pretrain)} records for pretraining, {len(heldout)} held out for the probe task")
    return path, heldout


def _shuffled_words(text: str, rng: random.Random) -> str:
    words = text.split()
    rng.shuffle(words)
    return " ".join(words)


def build_probe_rows(heldout: list[dict], seed: int) -> tuple[str, list[dict]]:
    """(task name, rows {text, label}) from held-out records, balanced where labels come from 'source'."""
    rng = random.Random(seed)
    sources = Counter(r.get("source") for r in heldout if r.get("source"))
    if len(sources) >= 2:
        per_class = min(sources.values())
        rows, taken = [], Counter()
        for record in heldout:
            label = record.get("source")
            if label and taken[label] < per_class:
                taken[label] += 1
                rows.append({"text": record["text"], "label": label})
        rng.shuffle(rows)
        return "docstring_source", rows
    rows = [{"text": r["text"], "label": "original"} if i % 2 else
            {"text": _shuffled_words(r["text"], rng), "label": "shuffled"} for i, r in enumerate(heldout)]
    rng.shuffle(rows)
    return "word_order", rows


def write_probe_task(heldout: list[dict], out: Path, seed: int) -> Path:
    name, rows = build_probe_rows(heldout, seed)
    task_dir = out / "probe_task" / name
    task_dir.mkdir(parents=True, exist_ok=True)
    cut = (2 * len(rows)) // 3
    for split, part in (("train", rows[:cut]), ("test", rows[cut:])):
        (task_dir / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    labels = Counter(r["label"] for r in rows)
    print(f"  probe task '{name}': {cut} train / {len(rows) - cut} test rows, classes {dict(labels)}")
    return task_dir


def demo_run_config(opts: DemoOptions, data_prefix: str, tokenizer_dir: Path, save_dir: Path) -> RunConfig:
    """A tiny run of ``opts.arch``; the LR warms up for a tenth of the run and decays by cosine."""
    decoder_layers = opts.decoder_layers if get_arch(opts.arch).has_reconstruction_decoder else 0
    model = ModelConfig(arch=opts.arch, encoder=opts.encoder, vocab_size=opts.vocab_size,
                        hidden_size=opts.hidden_size, num_layers=opts.num_layers,
                        num_attention_heads=opts.num_heads, max_position_embeddings=opts.seq_length,
                        decoder_num_layers=decoder_layers, hidden_dropout=0.0, attention_dropout=0.0,
                        make_vocab_size_divisible_by=64, transformer_impl="local")
    training = TrainingConfig(micro_batch_size=opts.micro_batch_size, global_batch_size=opts.micro_batch_size,
                              train_iters=opts.train_iters, lr=opts.lr, min_lr=opts.lr / 10,
                              lr_warmup_iters=max(1, opts.train_iters // 10), seed=opts.seed,
                              log_interval=max(1, opts.train_iters // 10))
    return RunConfig(model=model, masking=MaskingConfig(seed=opts.seed),
                     data=DataConfig(data_path=[data_prefix], split="98,2,0", seq_length=opts.seq_length,
                                     tokenizer=str(tokenizer_dir)),
                     training=training, checkpoint=CheckpointConfig(save_dir=str(save_dir), keep_last=1))


def save_initial_checkpoint(run_cfg: RunConfig, root: Path) -> Path:
    """The untrained model at the training seed, as a model-only checkpoint (the probe baseline)."""
    from megatron_crossbert import platform
    from megatron_crossbert.checkpoint.save import save_model_only
    from megatron_crossbert.models import build_model

    platform.initialize(run_cfg.parallel, run_cfg.training.seed)
    try:
        return save_model_only(build_model(run_cfg), run_cfg, root)
    finally:
        platform.destroy()


def train_tokenizer_stage(opts: DemoOptions, corpus: Path, out: Path) -> Path:
    from megatron_crossbert.data.tokenizer_training import train_tokenizer

    tokenizer_dir = out / "tokenizer"
    tokenizer = train_tokenizer([str(corpus)], tokenizer_dir, model_type="unigram", vocab_size=opts.vocab_size)
    print(f"  unigram vocabulary of {tokenizer.vocab_size} tokens -> {tokenizer_dir}")
    return tokenizer_dir


def preprocess_stage(corpus: Path, tokenizer_dir: Path, out: Path) -> tuple[str, dict]:
    from megatron_crossbert.data.preprocess import PreprocessOptions, document_prefix, preprocess

    output_prefix = str(out / "data" / "corpus")
    Path(output_prefix).parent.mkdir(parents=True, exist_ok=True)
    report = preprocess(PreprocessOptions(inputs=[str(corpus)], output_prefix=output_prefix,
                                          tokenizer=str(tokenizer_dir), workers=2, force=True))
    return document_prefix(output_prefix, "text"), report


def pretrain_stage(run_cfg: RunConfig) -> dict:
    from megatron_crossbert import platform
    from megatron_crossbert.training import train

    try:
        return train(run_cfg)
    finally:
        platform.destroy()


def probe_stage(models: dict[str, Path], task_dir: Path, opts: DemoOptions, out: Path) -> dict[str, dict]:
    from megatron_crossbert.evaluation.probing import ProbeRunConfig, run_probing
    from megatron_crossbert.evaluation.tasks import load_jsonl_task

    task = load_jsonl_task(task_dir)
    config = ProbeRunConfig(max_len=opts.seq_length, max_train=opts.probe_train, max_test=opts.probe_test,
                            cache_dir=str(out / "probe_cache"), seed=opts.seed)
    reports = {name: run_probing(path, [task], config) for name, path in models.items()}
    test = task.subsample(opts.probe_train, opts.probe_test, opts.seed).test
    chance = 100.0 * Counter(test.labels.tolist()).most_common(1)[0][1] / len(test)
    return {"task": task.spec.name, "chance_accuracy": chance,
            **{name: report["tasks"][task.spec.name]["metrics"] for name, report in reports.items()}}


def _prepare_out_dir(opts: DemoOptions) -> Path:
    out = Path(opts.out_dir)
    if out.exists() and any(out.iterdir()) and not opts.force:
        raise FileExistsError(f"{out} is not empty; pass --force to overwrite it or choose --out-dir")
    if out.exists() and opts.force:
        import shutil

        shutil.rmtree(out)
    (out / "corpus").mkdir(parents=True)
    return out


def run_demo(opts: DemoOptions) -> dict:
    """Run all seven stages; returns (and writes to <out>/summary.json) paths, timings and numbers."""
    out, timings = _prepare_out_dir(opts), {}
    start = _stage(1, "corpus", opts.corpus or "embedded docstrings of installed packages")
    corpus, heldout = prepare_corpus(opts, out)
    task_dir = write_probe_task(heldout, out, opts.seed)
    timings["corpus"] = time.perf_counter() - start
    start = _stage(2, "tokenizer", f"sentencepiece unigram, {opts.vocab_size} tokens")
    tokenizer_dir = train_tokenizer_stage(opts, corpus, out)
    timings["tokenizer"] = time.perf_counter() - start
    start = _stage(3, "preprocess", "JSONL -> Megatron .bin/.idx (2 workers)")
    prefix, report = preprocess_stage(corpus, tokenizer_dir, out)
    timings["preprocess"] = time.perf_counter() - start
    run_cfg = demo_run_config(opts, prefix, tokenizer_dir, out / "checkpoints")
    start = _stage(4, "initial checkpoint", "the untrained encoder, kept as the probe baseline")
    init_ckpt = save_initial_checkpoint(run_cfg, out / "init_checkpoint")
    timings["init_checkpoint"] = time.perf_counter() - start
    start = _stage(5, "pretrain", f"{get_arch(opts.arch).description} ({opts.encoder}) h={opts.hidden_size} "
                                  f"L={opts.num_layers}, {opts.train_iters} steps")
    summary = pretrain_stage(run_cfg)
    timings["pretrain"] = time.perf_counter() - start
    from megatron_crossbert.convert import export_to_hf
    from megatron_crossbert.convert.formats import default_format

    hf_class = default_format(run_cfg.model).base_class
    start = _stage(6, "export", f"Hugging Face {hf_class} + sentence-transformers files")

    hf_dir = export_to_hf(out / "checkpoints", out / "hf", force=True)
    timings["export"] = time.perf_counter() - start
    start = _stage(7, "probe", "frozen linear probe, trained vs untrained encoder")
    probe = probe_stage({"pretrained": hf_dir, "untrained": init_ckpt}, task_dir, opts, out)
    timings["probe"] = time.perf_counter() - start
    result = {"paths": {"out": str(out), "corpus": str(corpus), "tokenizer": str(tokenizer_dir), "data": prefix,
                        "checkpoint": str(out / "checkpoints"), "hf": str(hf_dir), "probe_task": str(task_dir)},
              "corpus": {k: report.get(k) for k in ("documents_written", "tokens") if k in report},
              "pretrain": {"steps": summary["iteration"], "first_loss": summary["losses"][0],
                           "final_loss": summary["final_loss"]},
              "probe": probe, "timings_s": {k: round(v, 1) for k, v in timings.items()}, "options": asdict(opts)}
    (out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def format_summary(result: dict) -> str:
    """The closing report a person reads: where things are and what the numbers say."""
    probe, pre = result["probe"], result["pretrain"]
    lines = ["", "=" * 72, "CrossBERT demo: done", "=" * 72]
    lines += [f"  {name:<11} {path}" for name, path in result["paths"].items()]
    lines += [f"  pretraining: {pre['steps']} steps, MLM loss {pre['first_loss']:.3f} -> {pre['final_loss']:.3f}",
              f"  probe '{probe['task']}' accuracy (%): pretrained {probe['pretrained']['accuracy']:.1f}, "
              f"untrained {probe['untrained']['accuracy']:.1f}, majority class {probe['chance_accuracy']:.1f}",
              "  time per stage (s): " + ", ".join(f"{k} {v}" for k, v in result["timings_s"].items()),
              f"  load it: AutoModel.from_pretrained('{result['paths']['hf']}') or "
              f"SentenceTransformer('{result['paths']['hf']}')", f"  summary: {result['paths']['out']}/summary.json"]
    return "\n".join(lines)
