"""The architecture registry's cheap facts: one ``ArchSpec`` per pretraining architecture, one ``EncoderFamily``
per family.

The torchtitan TrainSpec idea, split by import cost: the facts that configs validate against live here
(``get_arch(run_cfg.model.arch)``) and import nothing, so ``config`` stays torch-free; the parts that build a
run (model, dataset, forward step) are one ``TrainSpec`` subclass per architecture under ``architectures/``, whose
methods call the real builders (``architectures.registry.get_train_spec``). The training loop, the data builder, the benchmarks,
evaluation and the demo never compare architecture names themselves.

Architectures:
- ``crossbert``: encoder over the visible tokens of each view + a cross-attention reconstruction decoder.
- ``bert``: megatron-core's own ``BertModel`` (classic encoder only), 80/10/10 MLM.
- ``mlm``: the modern encoder module + a ModernBERT-style MLM head (modern encoder only), 80/10/10 MLM,
  so CrossBERT-modern against MLM-modern differs in the objective only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EncoderFamily:
    """The structural traits of one encoder family; the one owner of what 'classic' and 'modern' mean."""

    name: str
    learned_positions: bool
    """A learned absolute position table is added to the token embeddings (else RoPE in attention)."""
    embedding_norm: bool
    """A LayerNorm follows the token embeddings (ModernBERT); the first layer then has no attention norm."""
    gated_mlp: bool
    """GeGLU MLP: fc1 is 2*ffn wide, gelu(first half) * second half."""
    linear_bias: bool
    """Biases on every linear layer (attention and MLP)."""
    hf_formats: tuple[str, ...]
    """Names of the HF export formats that serve this family (``convert.formats.FORMATS``), in default
    priority: the default export is the first that represents a model exactly. The one owner of which
    formats serve which encoder."""


ENCODERS: dict[str, EncoderFamily] = {
    "classic": EncoderFamily("classic", learned_positions=True, embedding_norm=False, gated_mlp=False,
                             linear_bias=True, hf_formats=("xlmr-xl", "megatron-bert")),
    "modern": EncoderFamily("modern", learned_positions=False, embedding_norm=True, gated_mlp=True,
                            linear_bias=False, hf_formats=("modernbert",)),
}


@dataclass(frozen=True)
class ArchSpec:
    """What a config validates against for one pretraining architecture (its builders: ``architectures/``)."""

    name: str
    description: str
    """One line for logs and the model card."""
    encoders: tuple[str, ...]
    """The encoder families (keys of ``ENCODERS``) this architecture is built with."""
    has_reconstruction_decoder: bool
    """A pretraining-only decoder exists (``decoder_num_layers >= 1``); it is dropped on export."""
    encoder_mlm_head: bool
    """An MLM head reads the encoder output directly (an HF ``...ForMaskedLM`` target exists)."""
    uses_views: bool = False
    """Samples carry visible/target views, so ``masking.mask_ratio`` and ``num_views`` apply; the rules that
    follow from it (sample builder, pipeline shape, supervised tokens, attention calls) are ``arch_rules``'s
    ``SampleLayout``s and ``RunConfig.pipeline_shape``."""
    whiten_frozen_features: bool = False
    """Evaluation reads its frozen pooled features through PCA whitening by default (``evaluation/whitening.py``).
    On for all three: CrossBERT's encoder, read only through the decoder's cross-attention, collapses onto a few
    directions, BERT's less so, and whitening lifts both (docs/results.md, "Frozen features"); the same readout for every
    architecture keeps the claims study's comparisons like for like. Foreign models keep their own recipe."""


REGISTRY: dict[str, ArchSpec] = {spec.name: spec for spec in (
    ArchSpec(name="crossbert", description="CrossBERT encoder", encoders=("classic", "modern"),
             has_reconstruction_decoder=True, encoder_mlm_head=False, uses_views=True, whiten_frozen_features=True),
    ArchSpec(name="bert", description="BERT baseline (megatron-core BertModel)", encoders=("classic",),
             has_reconstruction_decoder=False, encoder_mlm_head=True, whiten_frozen_features=True),
    ArchSpec(name="mlm", description="MLM baseline (modern encoder + ModernBERT MLM head)",
             encoders=("modern",), has_reconstruction_decoder=False, encoder_mlm_head=True, whiten_frozen_features=True),
)}


def get_arch(name: str) -> ArchSpec:
    """The spec registered as ``name``; ValueError listing the registered names otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown architecture {name!r}; registered: {sorted(REGISTRY)}") from None


def get_encoder(name: str) -> EncoderFamily:
    """The encoder family registered as ``name``; ValueError listing the registered names otherwise."""
    try:
        return ENCODERS[name]
    except KeyError:
        raise ValueError(f"unknown encoder family {name!r}; registered: {sorted(ENCODERS)}") from None
