"""The ablations' seeded variants on the page, paired with the study's runs seed by seed.

A variant of CrossBERT's loss that runs at every study seed is read twice: at the plan's first probe step
(``early``, beside the study's runs read at that step) and at its run's end (``final``, beside the study's final
checkpoints of the same seed). Each comparison is a paired difference over seeds with its 95% interval, and a
verdict only where the interval excludes zero, as the claims' tables read.
"""

from __future__ import annotations

from megatron_crossbert.results_page import Column, Paragraph, Table

from ..study.stats import paired_difference, verdict

ARMS = (("crossbert-compl", "the study's CrossBERT"), ("bert", "the study's BERT"),
        ("init-reference", "the untrained encoder"))
"""The study's arms each seeded variant is paired with (run-name prefix, label)."""
EARLY_MEASURES = (("effective_rank", "pooled effective rank"), ("glue_raw", "GLUE raw"),
                  ("glue_whitened", "GLUE whitened"))
"""What the early variants are compared on across seeds: the pooled features' rank and the frozen GLUE readouts."""
FINAL_MEASURES = (*EARLY_MEASURES, ("mteb_raw", "MTEB-lite raw"), ("valid_loss", "held-out loss"))
"""At the runs' end MTEB-lite is measured too (every final reading scores it), and the held-out loss says what the
variant costs the reconstruction objective."""
ONLY_AGAINST = {"valid_loss": "crossbert-compl"}
"""Measures compared with one arm alone: the held-out loss is CrossBERT's reconstruction loss only beside
CrossBERT's (BERT's is an MLM loss, the untrained encoder's its first step's)."""
PAIRED_COLUMNS = [Column("variant"), Column("difference"), Column("mean ± 95%", "right"), Column("verdict")]


DIGITS = {"valid_loss": 3}
"""Decimals of a measure's differences where one is too few (losses differ by hundredths of a nat)."""


def _interval(gap, digits: int = 1) -> str:
    if gap is None:
        return "not measured yet"
    spread = "" if gap.half_width is None else f" ± {gap.half_width:.{digits}f}"
    return f"{gap.mean:+.{digits}f}{spread} (n={gap.n})"


def _variants(rows: list[dict], group: str) -> dict[str, list[dict]]:
    """{the first seed's key: the variant's measured rows of ``group``}, one entry per variant (its label)."""
    keys, found = {}, {}
    for row in rows:
        if row["group"] == group:
            key = keys.setdefault(row["what"], row["key"])
            found.setdefault(key, []).extend([row] if row["done"] else [])
    return found


def paired_rows(variants: dict[str, list[dict]], arms: dict[str, list[dict]], measures) -> list[list]:
    """One table row per (variant, arm, measure): the variant minus the arm, paired by seed."""
    body = []
    for variant, runs in variants.items():
        mine = {row["seed"]: row for row in runs}
        for name, label in ARMS:
            theirs = {row["seed"]: row for row in arms[name]}
            for field, measure in measures:
                if ONLY_AGAINST.get(field, name) != name:
                    continue
                gap = paired_difference({s: r.get(field) for s, r in mine.items()},
                                        {s: r.get(field) for s, r in theirs.items()})
                body.append([variant, f"{measure} − {label}", _interval(gap, DIGITS.get(field, 1)),
                             verdict(gap, "higher", "lower") if gap is not None else "—"])
    return body


def _by_arm(readings: list[dict]) -> dict[str, list[dict]]:
    return {name: [row for row in readings if row["model"].startswith(f"{name}-s")] for name, _ in ARMS}


def early_seed_blocks(rows: list[dict]) -> list:
    """Each early variant against the study's CrossBERT and BERT at the same step and its untrained encoder
    (``ARMS``), paired by seed: the mean difference with its 95% interval and a verdict where the interval
    excludes zero."""
    variants = _variants(rows, "early")
    at_step = [row for row in rows if row["done"] and row["group"] in ("trajectory", "early-reference")]
    body = []
    for variant, runs in variants.items():
        step = runs[0]["step"] if runs else None  # the untrained encoders are read at their one step
        arms = _by_arm([row for row in at_step if row["step"] == step or row["model"].startswith("init-reference")])
        body += paired_rows({variant: runs}, arms, EARLY_MEASURES)
    if not body:
        return []
    return [Paragraph("The same at every study seed, paired by seed (mean difference ± 95% interval; a verdict only "
                      "where the interval excludes zero):"), Table(PAIRED_COLUMNS, body)]


def final_readings(rows: list[dict]) -> list[dict]:
    """The study's runs read at their end the study's way: seed 1's probe-time rows, the other seeds' and the
    untrained encoders' final references."""
    return [row for row in rows if row["done"] and row["key"] == f"{row['model']}--r0"
            and row["group"] in ("probe-time", "final-reference")]


FINAL_COLUMNS = [Column("run"), Column("seed", "right"), *[Column(name, "right", ".1f") for name in (
    "GLUE raw", "GLUE whitened", "MTEB-lite raw", "effective rank")], Column("mean cosine", "right", ".3f"),
    Column("held-out loss", "right", ".3f")]


def final_seed_blocks(rows: list[dict]) -> list:
    """Each final variant at every seed beside the study's final checkpoints of that seed and the untrained
    encoders, then the paired differences (``FINAL_MEASURES``)."""
    variants = _variants(rows, "final")
    if not variants:
        return []
    readings = final_readings(rows)
    shown = [*readings, *(row for runs in variants.values() for row in runs)]
    body = [[row["model"], row["seed"], row["glue_raw"], row["glue_whitened"], row.get("mteb_raw"),
             row["effective_rank"], row["mean_cosine"], row.get("valid_loss")]
            for row in sorted(shown, key=lambda row: (row["seed"], row["model"]))]
    pending = sum(not row["done"] for row in rows if row["group"] in ("final", "final-reference"))
    intro = ("The same variants trained on to the end of the study's schedule (the early runs resumed), at every "
             "seed, beside the study's final checkpoints of that seed and the untrained encoders (all tokens, after "
             "the final norm; the held-out loss is each run's own: reconstruction for CrossBERT, MLM for BERT, "
             "the first step's for the untrained encoder)." + (f" Not measured yet: {pending} of these readings." if pending else ""))
    paired = paired_rows(variants, _by_arm(readings), FINAL_MEASURES)
    return [Paragraph(intro), Table(FINAL_COLUMNS, body),
            Paragraph("Paired by seed at the end (mean difference ± 95% interval; a verdict only where the interval "
                      "excludes zero):"), Table(PAIRED_COLUMNS, paired)]
