"""Preprocessing throughput: ``crossbert-preprocess`` with 1 and 2 workers versus the raw tokenizer.

Takes up to ``--max-docs`` documents (an equal share from each ``*.jsonl.gz`` file of ``--corpus``,
so every source is represented), writes them to one temporary JSONL file, then times

* ``tokenizer``: ``Tokenizer.encode_batch`` on the same texts in memory (the ceiling: no JSON
  parsing, no validation, no writing);
* ``preprocess wN``: the full pipeline with N workers, wall clock including pool start-up.

MB/s counts the UTF-8 bytes of the texts, the same number for every row. Prints JSON and a
markdown table; writes both under ``--out``. Without ``--tokenizer`` a BPE vocabulary is trained
on the sample first (not timed). Usage::

    python benchmarks/preprocess_throughput.py --max-docs 20000 --workers 1 2
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megatron_crossbert.data.jsonl import parse_line  # noqa: E402

DEFAULT_CORPUS = "/work/shared/data/corpus"


def sample_corpus(corpus: Path, max_docs: int, out: Path) -> list[str]:
    """Equal share of good documents from each file, written to ``out`` as JSONL."""
    files = sorted(corpus.glob("*.jsonl*")) if corpus.is_dir() else [corpus]
    if not files:
        raise FileNotFoundError(f"no *.jsonl(.gz) files in {corpus}")
    share = max(1, max_docs // len(files))
    texts: list[str] = []
    for path in files:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as handle:
            good = (parse_line(line, ["text"])[0] for line in handle)
            texts += [t["text"] for t in islice((g for g in good if g), share)]
    with open(out, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"text": t}) + "\n" for t in texts)
    return texts


def time_tokenizer(tokenizer, texts: list[str]) -> float:
    start = time.perf_counter()
    for i in range(0, len(texts), 1024):
        tokenizer.encode_batch(texts[i:i + 1024])
    return time.perf_counter() - start


def time_preprocess(jsonl: Path, tokenizer_dir: str, workdir: Path, workers: int, split: bool) -> tuple[float, dict]:
    from megatron_crossbert.data.preprocess import PreprocessOptions, preprocess

    opts = PreprocessOptions(inputs=[str(jsonl)], output_prefix=str(workdir / f"w{workers}"), tokenizer=tokenizer_dir,
                             workers=workers, split_sentences=split, progress=False, force=True)
    start = time.perf_counter()
    report = preprocess(opts)
    return time.perf_counter() - start, report


def row(name: str, seconds: float, docs: int, mbytes: float) -> dict:
    return {"run": name, "seconds": round(seconds, 3), "docs_per_s": round(docs / seconds, 1),
            "mb_per_s": round(mbytes / seconds, 3)}


def measure(args, work: Path, texts: list[str], tok_dir: str, tokenizer) -> tuple[list[dict], bool]:
    """Interleaved rounds (a load spike on a shared machine hits every row); fastest run per row."""
    mbytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    timings: dict[str, list[float]] = {}
    outputs = {}
    for _ in range(args.repeat):
        timings.setdefault("tokenizer encode_batch (in memory)", []).append(time_tokenizer(tokenizer, texts))
        for workers in args.workers:
            seconds, _ = time_preprocess(work / "sample.jsonl", tok_dir, work, workers, args.split_sentences)
            timings.setdefault(f"crossbert-preprocess --workers {workers}", []).append(seconds)
            outputs[workers] = (work / f"w{workers}_text_document.bin").read_bytes()
    rows = [row(name, min(times), len(texts), mbytes) for name, times in timings.items()]
    return rows, len({hash(b) for b in outputs.values()}) == 1


def markdown(rows: list[dict], docs: int, mbytes: float) -> str:
    lines = [f"{docs} documents, {mbytes:.1f} MB of text", "", "| run | seconds | docs/s | MB/s | vs tokenizer |",
             "| --- | ---: | ---: | ---: | ---: |"]
    base = rows[0]["mb_per_s"]
    for r in rows:
        lines.append(f"| {r['run']} | {r['seconds']} | {r['docs_per_s']:,} | {r['mb_per_s']} | "
                     f"{r['mb_per_s'] / base:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=DEFAULT_CORPUS, help="directory of *.jsonl.gz (or one file)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer dir; default: train BPE on the sample")
    parser.add_argument("--vocab-size", type=int, default=16384, help="vocab size when training one")
    parser.add_argument("--max-docs", type=int, default=20000, help="documents in the sample")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to time")
    parser.add_argument("--repeat", type=int, default=2, help="interleaved rounds; the fastest per row counts")
    parser.add_argument("--split-sentences", action="store_true", help="time with sentence splitting")
    parser.add_argument("--out", default="benchmarks/out", help="where JSON and markdown go")
    args = parser.parse_args(argv)

    from megatron_crossbert.data.tokenizer import load_tokenizer
    from megatron_crossbert.data.tokenizer_training import train_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        texts = sample_corpus(Path(args.corpus), args.max_docs, work / "sample.jsonl")
        mbytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
        tok_dir = args.tokenizer or str(work / "tok")
        if args.tokenizer is None:
            train_tokenizer([str(work / "sample.jsonl")], tok_dir, model_type="bpe", vocab_size=args.vocab_size)
        tokenizer = load_tokenizer(tok_dir)
        rows, identical = measure(args, work, texts, tok_dir, tokenizer)
    result = {"documents": len(texts), "text_mb": round(mbytes, 3), "vocab_size": tokenizer.vocab_size,
              "split_sentences": args.split_sentences, "repeat": args.repeat,
              "load_average": os.getloadavg(), "cpus": os.cpu_count(), "outputs_identical": identical, "rows": rows}
    table = markdown(rows, len(texts), mbytes)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "preprocess_throughput.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "preprocess_throughput.md").write_text(table + "\n")
    print(json.dumps(result, indent=2))
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
