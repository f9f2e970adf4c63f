"""The sample sections: where samples come from and how they are packed (``DataConfig``), and how
each packed sequence is split into visible and target positions (``MaskingConfig``)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from megatron_crossbert import masking as masking_rules
from megatron_crossbert import schedules
from megatron_crossbert.config.checks import (_at_least, _check_choices, _positive, _require, _seed, named_rule,
                                              setting, show)

StripMode = Literal["auto", "always", "never"]
"""How ``DataConfig.strip_wrapper_tokens`` treats [CLS]/[SEP]/eod already around each document."""


@dataclass
class MaskingConfig:
    """How each packed sequence is split into visible and target positions."""

    SECTION: ClassVar[str] = "masking"
    mask_ratio: float = 0.5
    """CrossBERT masking ratio r; the encoder sees round((1-r)*L) tokens. Must be in [0.5, 1)."""
    complementary: bool = True
    """Two views with disjoint visible sets per sequence (every token is a target at least once)."""
    pin_cls: bool = False
    """Keep position 0 ([CLS]) visible in every view; only possible without complementary views."""
    bert_mask_prob: float = 0.15
    """MLM baselines ('bert', 'mlm'): fraction of positions selected for prediction (BERT 0.15, ModernBERT 0.3)."""
    bert_replace_mask: float = 0.8
    """MLM baselines: of the selected, fraction replaced by [MASK]."""
    bert_replace_random: float = 0.1
    """MLM baselines: of the selected, fraction replaced by a random token (the rest stay unchanged)."""
    seed: int = 1234
    """Masks are a pure function of (seed, global sample index); resumed runs see the same masks."""
    bert_mask_prob_schedule: str | None = None
    """MLM baselines: the selection rate over training, 'THRESHOLD:RATE ...' with thresholds in tokens
    (K/M/B/T suffixes), first at 0; e.g. mmBERT's phases '0:0.3 2.3T:0.15 2.9T:0.05'. A pure function of
    the global sample index (resume-exact). Validation keeps bert_mask_prob, so its losses compare."""
    bert_mask_prob_schedule_style: Literal["step", "linear"] = "step"
    """step: hold each rate until the next threshold (mmBERT); linear: interpolate (Ankner et al. 2023)."""

    def __post_init__(self) -> None:
        _check_choices(self)
        _seed(self, "seed")
        _require(0.5 <= self.mask_ratio < 1.0, f"{setting(self, 'mask_ratio')} must be in [0.5, 1)")
        _require(0.0 < self.bert_mask_prob < 1.0, f"{setting(self, 'bert_mask_prob')} must be in (0, 1)")
        _at_least(self, "bert_replace_mask", 0)
        _at_least(self, "bert_replace_random", 0)
        _require(self.bert_replace_mask + self.bert_replace_random <= 1.0,
                 f"{setting(self, 'bert_replace_mask')} + {setting(self, 'bert_replace_random')} must be <= 1")
        _require(not (self.pin_cls and self.complementary),
                 f"{setting(self, 'pin_cls')} is incompatible with {setting(self, 'complementary')}: a pinned "
                 "position would be visible in both views, breaking disjointness")
        if self.bert_mask_prob_schedule:
            named_rule(setting(self, "bert_mask_prob_schedule"), lambda: schedules.mask_rate_schedule(
                self.bert_mask_prob_schedule, self.bert_mask_prob_schedule_style))

    @property
    def num_views(self) -> int:
        return 2 if self.complementary else 1

    def bert_mask_prob_at(self, index: int, seq_length: int) -> float:
        """The MLM selection rate of global sample ``index``: the schedule's, else ``bert_mask_prob``."""
        if not self.bert_mask_prob_schedule:
            return self.bert_mask_prob
        return schedules.mask_rate_schedule(self.bert_mask_prob_schedule,
                                            self.bert_mask_prob_schedule_style).at(index, seq_length)

    def at_fixed_rate(self) -> MaskingConfig:
        """This masking without the rate schedule: validation masks at ``bert_mask_prob`` all run long
        (comparable losses; ModernBERT evaluates at one rate too)."""
        return dataclasses.replace(self, bert_mask_prob_schedule=None)

    def visible_length(self, seq_length: int) -> int:
        """Lv for ``seq_length``; the rule lives in ``masking.visible_length``."""
        return masking_rules.visible_length(seq_length, self.mask_ratio)


@dataclass
class DataConfig:
    """Where samples come from and how they are packed."""

    SECTION: ClassVar[str] = "data"
    data_path: list[str | float] = field(default_factory=list)
    """Megatron blend: [prefix], [prefix1, prefix2, ...] (weighted by size) or [w1, prefix1, w2, prefix2, ...]
    with every weight > 0 (prefix without _document.bin); ``blend()`` reads it."""
    split: str = "969,30,1"
    """Train/valid/test proportions of each prefix's documents."""
    seq_length: int = 512
    """Packed sample length L (exactly L tokens, no padding)."""
    tokenizer: str = ""
    """Tokenizer directory written by crossbert-train-tokenizer (or any HF tokenizer dir)."""
    static_masks: str | None = None
    """Optional prefix of static mask pairs written by crossbert-preprocess --emit-mask-pairs."""
    cache_dir: str | None = None
    """Where megatron-core caches the sample index; None = next to the data."""
    num_workers: int = 0
    """DataLoader worker processes."""
    strip_wrapper_tokens: StripMode = "auto"
    """[CLS]/[SEP]/eod already around each document (Megatron-LM-written data): auto (strip when every
    sampled document has them), always (when most do), never (keep the data's tokens)."""
    document_mask: bool = True
    """Every attention stays inside the query's document: samples carry each position's document
    (fragment) id from the packing index and the models mask attention with it. False = every token of
    a packed sample attends to every other (the pre-issue-21 behaviour)."""

    def __post_init__(self) -> None:
        _positive(self, "seq_length")
        _check_choices(self)
        _at_least(self, "num_workers", 0)
        parts = self.split.replace("/", ",").split(",")
        _require(all(p.strip().replace(".", "", 1).isdigit() for p in parts) and 1 <= len(parts) <= 3,
                 f"{setting(self, 'split')} must look like '969,30,1'")
        _require(self.split_shares()[0] > 0, f"{setting(self, 'split')}: the train share is 0, so there is "
                                             "nothing to train on; give the first share a value > 0")
        if self.data_path:
            parse_blend(self.data_path)

    def split_shares(self) -> tuple[float, float, float]:
        """(train, validation, test) shares of ``split`` (missing ones are 0, as megatron reads them)."""
        values = [float(p) for p in self.split.replace("/", ",").split(",")]
        return tuple(values + [0.0] * (3 - len(values)))  # type: ignore[return-value]

    def blend(self) -> tuple[list[str], list[float] | None]:
        """``data_path`` as megatron's blend (``parse_blend``)."""
        return parse_blend(self.data_path)


def _weight(item: str | float) -> float | None:
    """A blend item read as a weight (a number, or a string that is one), else None (a prefix)."""
    if isinstance(item, (int, float)) and not isinstance(item, bool):
        return float(item)
    try:
        return float(item)
    except (TypeError, ValueError):
        return None


def parse_blend(data_path: list[str | float]) -> tuple[list[str], list[float] | None]:
    """``['p']`` -> (['p'], None); ``['a', 'b']`` -> (['a', 'b'], None) (megatron weighs them by size);
    ``[0.7, 'a', '0.3', 'b']`` -> (['a', 'b'], [0.7, 0.3]). The one reader of ``data.data_path``.

    Every weight must be finite and > 0. A weight of 0 is refused rather than read as "skip": megatron
    asserts on it, and a list that names a dataset it does not train on is a mistake more often than not."""
    if not data_path:
        raise ValueError("data.data_path=[] is empty: give at least one preprocessed prefix (--data-path)")
    weights = [_weight(item) for item in data_path]
    if not any(w is not None for w in weights):
        return [str(item) for item in data_path], None
    pairs = len(data_path) % 2 == 0 and all(w is not None for w in weights[0::2]) \
        and all(w is None for w in weights[1::2])
    given = f"data.data_path={show(list(data_path)[:6])}" + (f" (of {len(data_path)} items)"
                                                             if len(data_path) > 6 else "")
    if not pairs:
        raise ValueError(f"{given}: expected PREFIX [PREFIX ...] or WEIGHT PREFIX pairs")
    prefixes = [str(item) for item in data_path[1::2]]
    for weight, prefix in zip(weights[0::2], prefixes):
        _require(math.isfinite(weight) and weight > 0,
                 f"{given}: weight {weight} for {prefix}: a blend weight must be a finite number > 0; "
                 "leave the prefix out to skip it")
    return prefixes, [float(w) for w in weights[0::2]]
