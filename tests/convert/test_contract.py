"""The HF export contract, for every (architecture, encoder family, format) the registries list.

The cases come from ``arch.REGISTRY`` x ``arch.EncoderFamily.hf_formats``, so a new architecture,
family or format is covered without touching this file. Each case exports a randomised tiny
checkpoint (CPU, fp32) through ``export_to_hf`` and checks what docs/architecture.md promises of
every export:

- config.json names the format's class: its ``...ForMaskedLM`` exactly when the architecture has an
  encoder MLM head that the format maps exactly, else the base class;
- stock ``AutoModel`` (no remote code) equals the native ``encode`` within 1e-5 at every CPU attention
  backend of the class, on right-padded batches and, where the format says so, left-padded ones;
- with an MLM head, ``AutoModelForMaskedLM`` logits equal the native MLM logits;
- ``SentenceTransformer`` equals masked mean pooling of the native features;
- native -> HF -> native is bit-identical for everything exported, and re-exporting gives the same bytes;
- a format refuses a model of a family it does not serve, naming the family it needs.

Format-specific facts (XLM-R's shifted position table, the model cards, foreign imports) live in
convert/test_classic.py and convert/test_modernbert.py.
"""

from __future__ import annotations

import pytest
import torch

from megatron_crossbert.platform import distributed as platform
from megatron_crossbert.arch import ENCODERS, REGISTRY, get_arch
from megatron_crossbert.config import ModelConfig, ParallelConfig
from megatron_crossbert.convert import ConversionError, export_to_hf, import_from_hf
from megatron_crossbert.convert.formats import FORMATS, default_format, get_format
from megatron_crossbert.convert.formats.interface import encoder_of
from tests.support.conversion import (
    LENGTHS,
    TOL,
    encoder_keys,
    hf_features,
    left_padded,
    left_padded_diff,
    load_native,
    make_checkpoint,
    max_diff,
    native_features,
    padded_batch,
    read_json,
    read_safetensors,
    sentence_transformers_check,
    tiny_run_config,
)

CASES = [(arch, encoder, name) for arch, spec in REGISTRY.items() for encoder in spec.encoders
         for name in ENCODERS[encoder].hf_formats]
"""Every export the registries promise: (architecture, encoder family, format name)."""
IDS = [f"{arch}-{encoder}-{name}" for arch, encoder, name in CASES]
CPU_BACKENDS = ("sdpa", "eager")
"""Attention backends that run on the CPU; each case checks those its HF class supports."""
REFUSALS = [(name, encoder) for name in FORMATS for encoder in ENCODERS if name not in ENCODERS[encoder].hf_formats]
"""(format, encoder family it does not serve)."""


@pytest.fixture(scope="module")
def export(tmp_path_factory, word_tokenizer):
    """``export(arch, encoder, name) -> (checkpoint, native state, HF dir)``; one checkpoint per
    (arch, encoder), one export per case, each made once per module."""
    work, checkpoints, exports = tmp_path_factory.mktemp("contract"), {}, {}

    def make(arch: str, encoder: str, name: str):
        if (arch, encoder) not in checkpoints:
            root = work / f"ckpt_{arch}_{encoder}"
            checkpoints[arch, encoder] = root, make_checkpoint(
                root, tiny_run_config(arch, tokenizer=str(word_tokenizer), encoder=encoder))
        if (arch, encoder, name) not in exports:
            root, state = checkpoints[arch, encoder]
            exports[arch, encoder, name] = root, state, export_to_hf(root, work / f"hf_{arch}_{encoder}_{name}",
                                                                     format_name=name)
        return exports[arch, encoder, name]

    return make


def _has_mlm_head(arch: str, encoder: str, name: str) -> bool:
    model = tiny_run_config(arch, encoder=encoder).model
    return get_arch(arch).encoder_mlm_head and get_format(name).mlm_head_exact(model)


@pytest.mark.parametrize("arch, encoder, name", CASES, ids=IDS)
def test_config_names_the_format_class_and_default_is_first_exact(export, arch, encoder, name):
    _, _, out = export(arch, encoder, name)
    fmt = get_format(name)
    cfg = read_json(out / "config.json")
    assert cfg["model_type"] == fmt.model_type
    assert cfg["architectures"] == [fmt.mlm_class if _has_mlm_head(arch, encoder, name) else fmt.base_class]
    model = tiny_run_config(arch, encoder=encoder).model
    assert default_format(model) is next(FORMATS[n] for n in ENCODERS[encoder].hf_formats if not
                                         FORMATS[n].unsupported(model))


@pytest.mark.parametrize("arch, encoder, name", CASES, ids=IDS)
def test_automodel_matches_native_encode(export, arch, encoder, name):
    checkpoint, _, out = export(arch, encoder, name)
    fmt = get_format(name)
    ids, mask = padded_batch(125, LENGTHS, seed=3)
    native = native_features(checkpoint, ids, mask)
    for impl in (b for b in CPU_BACKENDS if b in fmt.attention_backends):
        cls, got = hf_features(out, impl, ids, mask)
        assert cls == fmt.base_class
        assert max_diff(got, native, mask) <= TOL, impl
        if fmt.left_padding:
            left_ids, left_mask = left_padded(ids, LENGTHS)
            _, got_left = hf_features(out, impl, left_ids, left_mask)
            assert left_padded_diff(got_left, native, LENGTHS) <= TOL, f"{impl}, left-padded"


@pytest.mark.parametrize("arch, encoder, name", [c for c in CASES if _has_mlm_head(*c)],
                         ids=[i for c, i in zip(CASES, IDS) if _has_mlm_head(*c)])
def test_mlm_logits_match_native(export, arch, encoder, name):
    from transformers import AutoModelForMaskedLM

    checkpoint, _, out = export(arch, encoder, name)
    ids, mask = padded_batch(125, LENGTHS, seed=2)
    platform.initialize(ParallelConfig(), 0)
    with torch.no_grad():
        native = load_native(checkpoint)(ids, mask)
        native = native[0] if isinstance(native, tuple) else native
        mlm = AutoModelForMaskedLM.from_pretrained(out, use_safetensors=True).eval()
        assert type(mlm).__name__ == get_format(name).mlm_class
        logits = mlm(input_ids=ids, attention_mask=mask).logits
    assert max_diff(logits, native, mask) <= TOL


@pytest.mark.parametrize("arch, encoder, name", CASES, ids=IDS)
def test_sentence_transformers_equals_mean_pooled_native(export, arch, encoder, name):
    checkpoint, _, out = export(arch, encoder, name)
    assert sentence_transformers_check(out, checkpoint, get_format(name).base_class) <= TOL


@pytest.mark.parametrize("arch, encoder, name", CASES, ids=IDS)
def test_round_trip_is_bit_identical(export, tmp_path, arch, encoder, name):
    checkpoint, state, out = export(arch, encoder, name)
    back_root = import_from_hf(out, tmp_path / "back")
    assert read_json(back_root / "run_config.json")["model"]["encoder"] == encoder
    platform.initialize(ParallelConfig(), 0)
    back = load_native(back_root).state_dict()
    exported = ([k for k in state if not k.endswith("_extra_state")] if _has_mlm_head(arch, encoder, name)
                else encoder_keys(state))
    assert exported and all(torch.equal(back[k], state[k]) for k in exported)
    assert any(k.startswith("decoder.") for k in back) == get_arch(arch).has_reconstruction_decoder  # fresh init
    again = read_safetensors(export_to_hf(back_root, tmp_path / "again", format_name=name))
    first = read_safetensors(out)
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)


@pytest.mark.parametrize("name, encoder", REFUSALS, ids=[f"{n}-not-{e}" for n, e in REFUSALS])
def test_a_format_refuses_a_family_it_does_not_serve(name, encoder):
    arch = next(a for a, spec in REGISTRY.items() if encoder in spec.encoders)
    fmt = get_format(name)
    with pytest.raises(ConversionError, match=f"needs {encoder_of(fmt)!r}"):
        fmt.check_exportable(ModelConfig(arch=arch, encoder=encoder))
