"""Which models a throughput benchmark compares, and at which shape.

A comparison is only fair if BERT and every CrossBERT setting share the encoder (width, depth,
heads, MLP), the vocabulary and the packed sequence length L; only the masking and the
reconstruction branch differ. ``SIZES`` holds those shared shapes:

* ``cpu``: BERT-base *shape ratios* scaled down so a 2-core run takes a few minutes. What sets
  the CrossBERT/BERT ratio is the split of work between the encoder's dense GEMMs, attention
  (~L/6h of the dense work), and the LM head (~V/(12·layers·h) of the encoder); BERT-base has
  L/6h = 0.11 and V/(12·12·768) = 0.28. ``cpu`` (h=256, 8 layers, L=192, V=8192) gives 0.125 and
  0.33, close to both.
* ``base`` / ``large``: the real BERT-base / BERT-large encoders at L=512 (GPU).
* ``claims``: the small model of the GPU claims run (``benchmarking.device.claims``): trained
  for minutes per arm on one H200, and timed here first to size the equal-FLOPs budget.
* ``tiny``: smoke tests only.
"""

from __future__ import annotations

from dataclasses import dataclass

from megatron_crossbert.config import RunConfig

SIZES: dict[str, dict] = {
    "tiny": dict(hidden_size=64, num_layers=2, num_attention_heads=2, vocab_size=512, seq_length=32,
                 decoder_num_layers=1, micro_batch_size=2),
    "cpu": dict(hidden_size=256, num_layers=8, num_attention_heads=4, vocab_size=8192, seq_length=192,
                decoder_num_layers=2, micro_batch_size=8),
    "base": dict(hidden_size=768, num_layers=12, num_attention_heads=12, vocab_size=30522, seq_length=512,
                 decoder_num_layers=2, micro_batch_size=32),
    "large": dict(hidden_size=1024, num_layers=24, num_attention_heads=16, vocab_size=30522, seq_length=512,
                  decoder_num_layers=2, micro_batch_size=32),
    "claims": dict(hidden_size=512, num_layers=8, num_attention_heads=8, vocab_size=16384, seq_length=128,
                   decoder_num_layers=2, micro_batch_size=128),
}

# (name, arch, mask_ratio, complementary): the settings the issue asks for, BERT first (the reference).
SETTINGS: list[tuple[str, str, float, bool]] = [
    ("bert", "bert", 0.5, True),
    ("crossbert r=0.5 single", "crossbert", 0.5, False),
    ("crossbert r=0.5 compl", "crossbert", 0.5, True),
    ("crossbert r=0.75 compl", "crossbert", 0.75, True),
]


@dataclass
class BenchCase:
    """One model in the comparison: a display name plus the full RunConfig it trains with."""

    name: str
    run_cfg: RunConfig

    @property
    def arch(self) -> str:
        return self.run_cfg.model.arch

    @property
    def seq_length(self) -> int:
        return self.run_cfg.data.seq_length

    @property
    def micro_batch_size(self) -> int:
        return self.run_cfg.training.micro_batch_size

    def input_tokens_per_sample(self) -> int:
        """Tokens of the packed sequence consumed per sample (L for every model)."""
        return self.seq_length

    def supervised_tokens_per_sample(self) -> float:
        """Tokens that receive a reconstruction loss per sample.

        CrossBERT: (L - Lv) targets per view times the number of views. BERT: the 15% selected
        positions (``bert_mask`` selects round(p·n) of the n non-special positions; synthetic
        batches contain no special tokens, so n = L).
        """
        masking = self.run_cfg.masking
        if self.arch == "bert":
            return float(max(1, round(masking.bert_mask_prob * self.seq_length)))
        targets = self.seq_length - masking.visible_length(self.seq_length)
        return float(targets * masking.num_views)


def size_overrides(size: str, **changes) -> dict:
    """The shape dict for ``size`` with explicit changes (e.g. seq_length=128) applied."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {sorted(SIZES)}")
    shape = dict(SIZES[size])
    shape.update({key: value for key, value in changes.items() if value is not None})
    return shape


def make_run_config(shape: dict, arch: str, mask_ratio: float, complementary: bool,
                    precision: str = "fp32", transformer_impl: str = "auto") -> RunConfig:
    """A RunConfig for one benchmark model; dropout off so timings do not depend on RNG work.

    ``train_iters``/``global_batch_size`` are irrelevant for timing but must validate; one
    micro-batch per step keeps the step a single forward/backward plus one optimizer update.
    """
    model = dict(arch=arch, hidden_size=shape["hidden_size"], num_layers=shape["num_layers"],
                 num_attention_heads=shape["num_attention_heads"], vocab_size=shape["vocab_size"],
                 max_position_embeddings=max(512, shape["seq_length"]), hidden_dropout=0.0,
                 attention_dropout=0.0, transformer_impl=transformer_impl,
                 decoder_num_layers=shape["decoder_num_layers"] if arch == "crossbert" else 0)
    raw = {
        "model": model,
        "masking": {"mask_ratio": mask_ratio, "complementary": complementary},
        "data": {"seq_length": shape["seq_length"]},
        "training": {"micro_batch_size": shape["micro_batch_size"],
                     "global_batch_size": shape["micro_batch_size"], "train_iters": 1000,
                     "lr_warmup_iters": 10, "precision": precision, "log_interval": 1000},
    }
    return RunConfig.from_dict(raw)


def default_cases(size: str = "cpu", precision: str = "fp32", transformer_impl: str = "auto",
                  settings: list[tuple[str, str, float, bool]] | None = None, **changes) -> list[BenchCase]:
    """BERT plus the three CrossBERT settings, all at the same encoder shape and L."""
    shape = size_overrides(size, **changes)
    return [BenchCase(name, make_run_config(shape, arch, ratio, compl, precision, transformer_impl))
            for name, arch, ratio, compl in (settings or SETTINGS)]
