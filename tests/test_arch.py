"""The architecture registry: every entry resolves, trains one real step, and nothing else branches on arch.

The training test goes through ``training.train`` on a tiny indexed corpus, so each entry's model
builder, dataset class, sample builder, forward step, pipeline shape and FLOPs function all run.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from megatron_crossbert import arch
from megatron_crossbert.arch_rules import sample_layout
from megatron_crossbert.config import load_run_config
from megatron_crossbert.masking import TokenIds
from tests.support import REPO_ROOT
from tests.support.training import tiny_config

PACKAGE = REPO_ROOT / "megatron_crossbert"
ENTRIES = [(name, encoder) for name, spec in arch.REGISTRY.items() for encoder in spec.encoders]


def test_registry_lists_every_architecture_and_family():
    assert sorted(arch.REGISTRY) == ["bert", "crossbert", "mlm"]
    assert set(ENTRIES) == {("crossbert", "classic"), ("crossbert", "modern"), ("bert", "classic"),
                            ("mlm", "modern")}
    for spec in arch.REGISTRY.values():
        for encoder in spec.encoders:
            assert arch.get_encoder(encoder).hf_formats
    with pytest.raises(ValueError, match="registered: \\['bert', 'crossbert', 'mlm'\\]"):
        arch.get_arch("gpt")


def _model_overrides(name: str, encoder: str) -> list[str]:
    decoder = 1 if arch.get_arch(name).has_reconstruction_decoder else 0
    return [f"model.arch={name}", f"model.encoder={encoder}", f"model.decoder_num_layers={decoder}"]


def test_every_architecture_has_one_train_spec_of_real_parts():
    """The builders table holds the registry's names, each a TrainSpec subclass whose methods are its own (so a call
    through the table is a method call a reader can follow) and whose layout is the one ``sample_layout`` names."""
    from megatron_crossbert.arch_rules import sample_layout
    from megatron_crossbert.architectures.registry import TRAIN_SPECS, get_train_spec
    from megatron_crossbert.architectures.spec import TrainSpec

    assert sorted(TRAIN_SPECS) == sorted(arch.REGISTRY)
    for name, spec in TRAIN_SPECS.items():
        assert spec.arch is arch.get_arch(name)
        assert isinstance(spec, TrainSpec) and spec.layout is sample_layout(name)
        assert type(spec).build_model is not TrainSpec.build_model and type(spec).forward_step is not TrainSpec.forward_step
    with pytest.raises(ValueError, match="registered: \\['bert', 'crossbert', 'mlm'\\]"):
        get_train_spec("gpt")


def test_the_registry_holds_no_string_references():
    """Its fields are facts (no "module:attribute" strings resolved at run time) and it imports nothing."""
    text = (PACKAGE / "arch.py").read_text()
    assert "import_module" not in text and not re.search(r'"[\w.]+:\w+"', text)
    assert [line for line in text.splitlines() if line.startswith(("import ", "from "))] == [
        "from __future__ import annotations", "from dataclasses import dataclass"]


@pytest.mark.parametrize("name", sorted(arch.REGISTRY))
def test_sample_builders_match_pipeline_shape_and_supervised_tokens(name):
    """One sample of each builder has the shapes the spec's pipeline shape and token count promise."""
    spec, layout = arch.get_arch(name), sample_layout(name)
    cfg = load_run_config(None, _model_overrides(name, spec.encoders[0]) + ["data.seq_length=64"])
    tokens = np.random.default_rng(0).integers(6, 500, size=64)
    sample = layout.make_sample(cfg.masking, 3, tokens, TokenIds(mask_id=4, vocab_size=512, special_ids=(0, 1, 2, 3, 4)))
    seq, rows = cfg.pipeline_shape()
    if spec.uses_views:
        assert sample["visible"].shape == (cfg.masking.num_views, seq)
        assert sample["targets"].size == layout.supervised_tokens(cfg)
    else:
        assert seq == 64 and sample["tokens"].shape == (64,)
        assert sample["loss_mask"].sum() == layout.supervised_tokens(cfg)
    assert rows == cfg.training.micro_batch_size * (cfg.masking.num_views if spec.uses_views else 1)


@pytest.mark.parametrize("name,encoder", ENTRIES)
def test_one_training_step_of_every_entry(name, encoder, indexed_corpus):
    from megatron_crossbert.models import model_flops_per_sample
    from megatron_crossbert.training import train

    cfg = tiny_config(name, indexed_corpus, None, model__encoder=encoder, training__train_iters=2,
                      training__lr_warmup_iters=0, training__global_batch_size=2, training__log_interval=1)
    summary = train(cfg)
    assert summary["iteration"] == 2 and summary["skipped_steps"] == 0
    assert all(math.isfinite(loss) and 4.0 < loss < 8.0 for loss in summary["losses"])  # ~ln(vocab) at init
    assert summary["losses"][1] != summary["losses"][0]  # the optimizer step changed the model
    assert model_flops_per_sample(cfg) > 0


_NAME = r"""(?:\.|\[["'])?\b(?:arch|encoder)\b["']?\]?"""  # arch, .encoder, ["arch"], ['encoder']
NAME_COMPARISONS = [re.compile(pattern) for pattern in (
    _NAME + r"\s*(?:==|!=)",                                     # arch == ..., ["arch"] == ..., .encoder != ...
    r"\b(?:arch|encoder)\s+(?:not\s+)?in\s+[(\[{\"']",          # arch in ("bert", ...)
    r"""\.get\(["'](?:arch|encoder)["'][^)]*\)\s*(?:==|!=)""",  # r.get("encoder", "classic") == ...
    r"(?:==|!=)\s*[\w.]*" + _NAME + r"(?![\w(])",                 # ... == cfg.encoder, ... != r["arch"]
)]
"""Comparisons of an architecture or encoder-family name: only the registry (arch.py) may make them."""


def name_comparisons(text: str) -> list[int]:
    return [number for number, line in enumerate(text.splitlines(), 1)
            if any(pattern.search(line) for pattern in NAME_COMPARISONS)]


def test_the_guard_catches_every_spelling_of_a_name_comparison():
    caught = ['if cfg.arch == "bert":', 'same = result["arch"] == arch', "if r['encoder'] != 'modern':",
              'x = r.get("encoder", "classic") == "classic"', 'if encoder == "modern":', 'if arch in ("bert", "mlm"):',
              'if "classic" == model_cfg.encoder:', 'same = a == r["arch"]']
    kept = ['for name, family in ENCODERS.items():', 'if parts[0] == "encoder" and parts[1] == "layers":',
            'spec = get_arch(cfg.arch)', 'encoders = spec.encoders', 'for arch in REGISTRY:']
    assert [bool(name_comparisons(line)) for line in caught] == [True] * len(caught)
    assert [bool(name_comparisons(line)) for line in kept] == [False] * len(kept)


def test_no_arch_or_encoder_branches_outside_the_registry():
    """``arch ==``, ``["arch"] ==``, ``encoder ==``, ``arch in (...)``: in arch.py only, library and experiments."""
    hits = [f"{path.relative_to(REPO_ROOT)}:{number}" for root in (PACKAGE, REPO_ROOT / "experiments")
            for path in sorted(root.rglob("*.py")) if path != PACKAGE / "arch.py"
            for number in name_comparisons(path.read_text())]
    assert hits == []


def test_checkpoints_of_another_encoder_family_are_refused():
    from megatron_crossbert.checkpoint.verify import config_mismatches

    classic = load_run_config(None, [])
    modern = load_run_config(None, ["model.encoder=modern", "model.decoder_position_embedding=false"])
    diffs = config_mismatches(classic, modern)
    assert any(d.startswith("model.encoder: checkpoint 'classic' vs run 'modern'") for d in diffs), diffs
    assert any(d.startswith("model.decoder_position_embedding") for d in diffs), diffs
