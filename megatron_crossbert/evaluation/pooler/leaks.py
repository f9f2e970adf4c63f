"""Training pairs checked against the test sets a pooler will be scored on.

A pair leaks when it is a test pair of an STS task: the same two texts, in either order, compared without
case and with runs of whitespace made one space (STSBenchmark's train split holds 1,002 of STS12's test pairs
this way). A run with leaking pairs is refused unless asked for, and its report then says so. Texts that
merely appear in a test set (one side of a pair, or a classification test text) are counted too, for the
report; they carry no gold score, so they do not refuse a run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from megatron_crossbert.evaluation.tasks.folders import discover_task_folders, read_columns
from megatron_crossbert.evaluation.pooler.pairs import TextPairs


def normalize_text(text: str) -> str:
    """Case-insensitive, spacing-insensitive form of a text."""
    return " ".join(text.casefold().split())


def pair_key(first: str, second: str) -> tuple[str, str]:
    """A pair's order-free normalised key."""
    a, b = normalize_text(first), normalize_text(second)
    return (a, b) if a <= b else (b, a)


@dataclass
class LeakReport:
    """Overlap of training pairs with each test set, by task folder."""

    pairs: dict[str, int] = field(default_factory=dict)
    """Task -> training pairs that are one of its test pairs (STS tasks)."""
    texts: dict[str, int] = field(default_factory=dict)
    """Task -> training texts that are one of its test texts."""
    allowed: bool = False
    """The run was asked to go on despite leaking pairs (its report is marked)."""

    @property
    def leaking_pairs(self) -> int:
        return sum(self.pairs.values())

    def as_dict(self) -> dict:
        return {"pairs": self.pairs, "texts": self.texts, "leaking_pairs": self.leaking_pairs,
                "allowed": self.allowed, "marked": self.allowed and self.leaking_pairs > 0}


def held_out_sets(benchmark_dir: str | Path) -> dict[str, tuple[set, set]]:
    """Task folder -> (normalised test pair keys, normalised test texts)."""
    out = {}
    for folder in discover_task_folders(benchmark_dir):
        columns = read_columns(folder.splits["test"], folder.kind, "test")
        if folder.kind == "sts":
            keys = {pair_key(a, b) for a, b in zip(columns["sentence1"], columns["sentence2"])}
            texts = {normalize_text(t) for t in columns["sentence1"] + columns["sentence2"]}
        else:
            keys, texts = set(), {normalize_text(t) for t in columns["text"]}
        out[folder.name] = (keys, texts)
    return out


def check_leaks(pairs: TextPairs, benchmark_dir: str | Path, *, allow: bool = False) -> LeakReport:
    """Count ``pairs``' overlap with every test set of ``benchmark_dir``; raise when pairs leak and not ``allow``."""
    keys = [pair_key(a, b) for a, b in zip(pairs.anchors, pairs.positives)]
    texts = {normalize_text(t) for t in pairs.anchors + pairs.positives}
    report = LeakReport(allowed=allow)
    for task, (test_keys, test_texts) in held_out_sets(benchmark_dir).items():
        report.pairs[task] = sum(key in test_keys for key in keys)
        report.texts[task] = len(texts & test_texts)
    if report.leaking_pairs and not allow:
        found = ", ".join(f"{task} {n}" for task, n in report.pairs.items() if n)
        raise ValueError(f"{pairs.source}: {report.leaking_pairs} training pairs are test pairs of the benchmark "
                         f"({found}); drop them, or pass --allow-test-overlap to train anyway (the report is marked)")
    return report
