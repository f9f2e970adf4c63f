"""``crossbert-demo``: the whole pipeline on the CPU in minutes, with no network.

Stages (each prints a numbered header; the tools underneath show their own progress):
 1. corpus     - the embedded docstring corpus (see corpus.py) or ``--corpus`` JSONL;
                 every 10th record is held out for the probe task and never pretrained on
 2. tokenizer  - sentencepiece unigram with [CLS]/[SEP]/[MASK]/[PAD]/[UNK]/[EOD] (bit-reproducible;
                 the HF WordPiece trainer breaks frequency ties arbitrarily)
 3. preprocess - Megatron .bin/.idx
 4. init ckpt  - the untrained model, saved for the probe comparison
 5. pretrain   - a tiny CrossBERT (complementary masking, r=0.5), or ``--arch``/``--encoder``
 6. export     - Hugging Face dir in the encoder's default format (AutoModel / SentenceTransformer ready)
 7. probe      - frozen linear probe on the held-out task: trained vs untrained encoder vs chance,
                 then (when the MTEB-lite data is there) both encoders' average over its STS folders, scored by mteb

The probe task is "which package wrote this docstring?" for the default corpus (labels from the
record's ``source``), or, for a corpus without labels, "is this paragraph's word order original or
shuffled?" - both need nothing but the corpus itself.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from megatron_crossbert.arch import get_arch
from megatron_crossbert.config import (CheckpointConfig, DataConfig, MaskingConfig, ModelConfig, RunConfig,
                                       TrainingConfig)
from megatron_crossbert.fsutil import move_aside
from megatron_crossbert.shared_data import find_shared

HOLDOUT_EVERY = 10


def default_mteb_lite_dir() -> str | None:
    """The MTEB-lite folders of the shared data folder (``megatron_crossbert.shared_data``), if they are there."""
    found = find_shared("mteb_lite", "STS13")
    return None if found is None else str(found.parent)


def _demo_model() -> ModelConfig:
    return ModelConfig(vocab_size=8000, hidden_size=128, num_layers=4, num_attention_heads=4, decoder_num_layers=1,
                       max_position_embeddings=128, hidden_dropout=0.0, attention_dropout=0.0,
                       make_vocab_size_divisible_by=64, transformer_impl="local")


def _demo_training() -> TrainingConfig:
    """Warm-up, minimum LR and log interval follow ``train_iters`` and ``lr`` (``demo_run_config``)."""
    return TrainingConfig(micro_batch_size=16, global_batch_size=16, train_iters=1200, lr=1e-3, lr_warmup_iters=0)


@dataclass
class DemoOptions:
    """Sizes chosen so the default run takes about 5-6 minutes on 2 CPU cores.

    1200 steps is roughly where this model leaves the MLM unigram plateau (loss ~6.3) far enough for
    the frozen probe to beat the untrained encoder; 300 steps did not. The run's sizes are the
    config sections themselves (the tokenizer's vocabulary is ``model.vocab_size``, the seed is
    ``training.seed`` = ``masking.seed``); ``demo_run_config`` completes them into one RunConfig.
    """

    out_dir: str = "outputs/demo"
    """Where everything is written; must be empty or absent unless ``force``."""
    corpus: str | None = None
    """JSONL(.gz) with a 'text' field instead of the embedded docstring corpus."""
    corpus_bytes: int = 3_000_000
    """Size of the embedded corpus in bytes of text."""
    probe_train: int = 600
    """Probe training rows (max)."""
    probe_test: int = 300
    """Probe test rows (max)."""
    force: bool = False
    """Replace an existing, non-empty ``out_dir``."""
    model: ModelConfig = field(default_factory=_demo_model)
    """Architecture, encoder family and sizes (the HF export needs a registered format for the encoder)."""
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    """Complementary masking at r = 0.5 by default."""
    data: DataConfig = field(default_factory=lambda: DataConfig(seq_length=128, split="98,2,0"))
    """Sequence length and split; the data path and tokenizer are the demo's own outputs."""
    training: TrainingConfig = field(default_factory=_demo_training)
    """Steps, batch, peak LR and seed."""
    mteb_lite_dir: str | None = field(default_factory=default_mteb_lite_dir)
    """MTEB-lite folders whose STS tasks both encoders are scored on; None prints the command instead."""


def _stage(number: int, name: str, detail: str) -> float:
    print(f"\n[demo {number}/7] {name}: {detail}", flush=True)
    return time.perf_counter()


def _read_records(path: Path) -> list[dict]:
    from megatron_crossbert.evaluation.tasks.data import read_jsonl_rows

    return [r for r in read_jsonl_rows(path)
            if isinstance(r, dict) and isinstance(r.get("text"), str) and r["text"].strip()]


def prepare_corpus(opts: DemoOptions, out: Path) -> tuple[Path, list[dict]]:
    """Write the pretraining JSONL (without the held-out records); return it and the held-out records."""
    from .corpus import write_corpus

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
    """The demo's RunConfig: its sections, the LR warming up for a tenth of the run and decaying by cosine
    to a tenth, a position table of exactly L rows, and no decoder layers where the architecture has none."""
    iters, has_decoder = opts.training.train_iters, get_arch(opts.model.arch).has_reconstruction_decoder
    model = replace(opts.model, max_position_embeddings=opts.data.seq_length,
                    decoder_num_layers=opts.model.decoder_num_layers if has_decoder else 0)
    training = replace(opts.training, min_lr=opts.training.lr / 10, lr_warmup_iters=max(1, iters // 10),
                       log_interval=max(1, iters // 10))
    return RunConfig(model=model, masking=opts.masking,
                     data=replace(opts.data, data_path=[data_prefix], tokenizer=str(tokenizer_dir)),
                     training=training, checkpoint=CheckpointConfig(save_dir=str(save_dir), keep_last=1))


def save_initial_checkpoint(run_cfg: RunConfig, root: Path) -> Path:
    """The untrained model at the training seed, as a model-only checkpoint (the probe baseline)."""
    from megatron_crossbert.platform import distributed as platform
    from megatron_crossbert.checkpoint.save import save_model_only
    from megatron_crossbert.architectures.build import build_model

    platform.initialize(run_cfg.parallel, run_cfg.training.seed)
    try:
        return save_model_only(build_model(run_cfg), run_cfg, root)
    finally:
        platform.destroy()


def train_tokenizer_stage(opts: DemoOptions, corpus: Path, out: Path) -> Path:
    from megatron_crossbert.data.tokenizers.training import train_tokenizer

    tokenizer_dir = out / "tokenizer"
    tokenizer = train_tokenizer([str(corpus)], tokenizer_dir, model_type="unigram", vocab_size=opts.model.vocab_size)
    print(f"  unigram vocabulary of {tokenizer.vocab_size} tokens -> {tokenizer_dir}")
    return tokenizer_dir


def preprocess_stage(corpus: Path, tokenizer_dir: Path, out: Path) -> tuple[str, dict]:
    from megatron_crossbert.data.preprocessing.preprocess import PreprocessOptions, document_prefix, preprocess

    output_prefix = str(out / "data" / "corpus")
    Path(output_prefix).parent.mkdir(parents=True, exist_ok=True)
    report = preprocess(PreprocessOptions(inputs=[str(corpus)], output_prefix=output_prefix,
                                          tokenizer=str(tokenizer_dir), workers=2, force=True))
    return document_prefix(output_prefix, "text"), report


class DemoStopped(RuntimeError):
    """Pretraining stopped on a signal: the demo ends there; the CLI prints one line and exits 128 + the
    signal's number, as a shell reports a process a signal ended."""

    def __init__(self, message: str, signal_name: str | None) -> None:
        super().__init__(message)
        self.signum = int(getattr(signal, signal_name or "", signal.SIGTERM))


def pretrain_stage(run_cfg: RunConfig) -> dict:
    from megatron_crossbert.platform import distributed as platform
    from megatron_crossbert.training import train

    try:
        return train(run_cfg)
    finally:
        platform.destroy()


def probe_stage(models: dict[str, Path], task_dir: Path, opts: DemoOptions, out: Path) -> dict[str, dict]:
    from megatron_crossbert.evaluation.probing.runner import ProbeRunConfig, run_probing
    from megatron_crossbert.evaluation.tasks.data import load_jsonl_task

    task = load_jsonl_task(task_dir)
    config = ProbeRunConfig(max_len=opts.data.seq_length, max_train=opts.probe_train, max_test=opts.probe_test,
                            cache_dir=str(out / "probe_cache"), seed=opts.training.seed)
    reports = {name: run_probing(path, [task], config) for name, path in models.items()}
    test = task.subsample(opts.probe_train, opts.probe_test, opts.training.seed).test
    chance = 100.0 * Counter(test.labels.tolist()).most_common(1)[0][1] / len(test)
    return {"task": task.spec.name, "chance_accuracy": chance,
            **{name: report["tasks"][task.spec.name]["metrics"] for name, report in reports.items()}}


def sts_command(hf_dir: Path) -> str:
    return f"crossbert-mteb --model {hf_dir} --benchmark-dir ../shared/data/mteb_lite --tasks STS12,STS13,STS14,STS15,STS16"


def sts_stage(models: dict[str, Path], opts: DemoOptions, out: Path) -> dict:
    """STS average (cosine Spearman, mteb) of each encoder on the MTEB-lite STS folders, or the command to run.

    Measured: 27 s for both encoders of the default demo (all 11,794 STS12-16 pairs) on 2 CPU cores shared
    with other jobs (docs/results.md), under the 30 s a demo stage may take, so the demo runs it whenever the
    data is there; it prints the time it took.
    """
    if not opts.mteb_lite_dir or not Path(opts.mteb_lite_dir).is_dir():
        return {"command": sts_command(models["pretrained"])}
    from megatron_crossbert.evaluation.mteb.adapter import build_mteb_encoder, evaluate_mteb
    from megatron_crossbert.evaluation.mteb.in_training import load_mteb_tasks

    start, result = time.perf_counter(), {}
    for name, path in models.items():
        tasks = load_mteb_tasks([f"mteb:{opts.mteb_lite_dir}"], max_test=None)
        encoder = build_mteb_encoder(str(path), cache_dir=str(out / "probe_cache"), device="cpu")
        summary, _ = evaluate_mteb(encoder, tasks, raise_error=True)
        result[name] = {"average": summary["average"], "tasks": {r["folder"]: r["main_score"] for r in summary["tasks"]}}
    return {**result, "seconds": round(time.perf_counter() - start, 1), "data": opts.mteb_lite_dir}


def _prepare_out_dir(opts: DemoOptions) -> Path:
    out = Path(opts.out_dir)
    if out.exists() and any(out.iterdir()):
        if not opts.force:
            raise FileExistsError(f"{out} is not empty; pass --force to move it aside or choose --out-dir")
        print(f"  --force: moved the existing {out} to {move_aside(out)} (nothing deleted)")
    (out / "corpus").mkdir(parents=True, exist_ok=True)
    return out


def run_demo(opts: DemoOptions) -> dict:
    """Run all seven stages; returns (and writes to <out>/summary.json) paths, timings and numbers."""
    out, timings = _prepare_out_dir(opts), {}
    start = _stage(1, "corpus", opts.corpus or "embedded docstrings of installed packages")
    corpus, heldout = prepare_corpus(opts, out)
    task_dir = write_probe_task(heldout, out, opts.training.seed)
    timings["corpus"] = time.perf_counter() - start
    start = _stage(2, "tokenizer", f"sentencepiece unigram, {opts.model.vocab_size} tokens")
    tokenizer_dir = train_tokenizer_stage(opts, corpus, out)
    timings["tokenizer"] = time.perf_counter() - start
    start = _stage(3, "preprocess", "JSONL -> Megatron .bin/.idx (2 workers)")
    prefix, report = preprocess_stage(corpus, tokenizer_dir, out)
    timings["preprocess"] = time.perf_counter() - start
    run_cfg = demo_run_config(opts, prefix, tokenizer_dir, out / "checkpoints")
    start = _stage(4, "initial checkpoint", "the untrained encoder, kept as the probe baseline")
    init_ckpt = save_initial_checkpoint(run_cfg, out / "init_checkpoint")
    timings["init_checkpoint"] = time.perf_counter() - start
    model = run_cfg.model
    start = _stage(5, "pretrain", f"{get_arch(model.arch).description} ({model.encoder}) h={model.hidden_size} "
                                  f"L={model.num_layers}, {run_cfg.training.train_iters} steps")
    summary = pretrain_stage(run_cfg)
    timings["pretrain"] = time.perf_counter() - start
    if summary.get("stopped_by_signal"):  # a user's Ctrl-C or a batch system's SIGTERM means stop, not export
        raise DemoStopped(f"{out / 'checkpoints'}: stopped by {summary.get('stop_reason') or 'a signal'} at step "
                          f"{summary['iteration']}; the checkpoint is saved there, nothing was exported or probed",
                          summary.get("stop_reason"))
    from megatron_crossbert.convert import export_to_hf
    from megatron_crossbert.convert.formats import default_format

    hf_class = default_format(run_cfg.model).base_class
    start = _stage(6, "export", f"Hugging Face {hf_class} + sentence-transformers files")

    hf_dir = export_to_hf(out / "checkpoints", out / "hf", force=True)
    timings["export"] = time.perf_counter() - start
    start = _stage(7, "probe", "frozen linear probe, trained vs untrained encoder")
    models = {"pretrained": hf_dir, "untrained": init_ckpt}
    probe = probe_stage(models, task_dir, opts, out)
    sts = sts_stage(models, opts, out)
    timings["probe"] = time.perf_counter() - start
    result = {"paths": {"out": str(out), "corpus": str(corpus), "tokenizer": str(tokenizer_dir), "data": prefix,
                        "checkpoint": str(out / "checkpoints"), "hf": str(hf_dir), "probe_task": str(task_dir)},
              "corpus": {k: report.get(k) for k in ("documents_written", "tokens") if k in report},
              "pretrain": {"steps": summary["iteration"], "first_loss": summary["losses"][0],
                           "final_loss": summary["final_loss"]},
              "probe": probe, "sts": sts, "timings_s": {k: round(v, 1) for k, v in timings.items()}, "options": asdict(opts)}
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
              _sts_line(result["sts"]),
              "  time per stage (s): " + ", ".join(f"{k} {v}" for k, v in result["timings_s"].items()),
              f"  load it: AutoModel.from_pretrained('{result['paths']['hf']}') or "
              f"SentenceTransformer('{result['paths']['hf']}')", f"  summary: {result['paths']['out']}/summary.json"]
    return "\n".join(lines)


def _sts_line(sts: dict) -> str:
    """Labelled by the folders it read (every STS folder of the data: STS12-16 and STSBenchmark in the shared one)."""
    if "command" in sts:
        return f"  STS (MTEB STS12-16): MTEB-lite data not found; score the export with: {sts['command']}"
    folders = ", ".join(sorted(sts["pretrained"]["tasks"]))
    return (f"  STS average (MTEB-lite {folders}; cosine Spearman x100): pretrained "
            f"{sts['pretrained']['average']:.1f}, untrained {sts['untrained']['average']:.1f} "
            f"({sts['seconds']:.0f} s, {sts['data']})")
