"""The architecture registry: one ``ArchSpec`` per pretraining architecture, one ``EncoderFamily`` per family.

The torchtitan TrainSpec idea: everything that differs between architectures is a field of one object,
looked up once by name (``get_arch(run_cfg.model.arch)``); the training loop, the data builder, the
benchmarks, evaluation and the demo never compare architecture names themselves.

This module imports nothing of the project (nor torch, nor megatron), so ``config`` can validate against
it. Every field that needs more is a ``LazyRef`` ("module:attribute") resolved on first use: the models
and steps (torch), and the rules that read a run's config (``arch_rules``, which imports ``config``), so
the dependency runs one way, config -> arch, with no loop.

Architectures:
- ``crossbert``: encoder over the visible tokens of each view + a cross-attention reconstruction decoder.
- ``bert``: megatron-core's own ``BertModel`` (classic encoder only), 80/10/10 MLM.
- ``mlm``: the modern encoder module + a ModernBERT-style MLM head (modern encoder only), 80/10/10 MLM,
  so CrossBERT-modern against MLM-modern differs in the objective only.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import import_module
from typing import Any


@functools.cache
def _resolve(path: str) -> Any:
    """The object ``path`` names, imported once per process: ``make_sample`` runs for every sample."""
    module, _, attribute = path.partition(":")
    return getattr(import_module(module), attribute)


@dataclass(frozen=True)
class LazyRef:
    """``"package.module:attribute"``: imported on first use so this registry stays torch-free."""

    path: str

    def get(self) -> Any:
        return _resolve(self.path)

    def __call__(self, *args, **kwargs):
        return self.get()(*args, **kwargs)


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
    """Everything that differs between pretraining architectures."""

    name: str
    description: str
    """One line for logs and the model card."""
    encoders: tuple[str, ...]
    """The encoder families (keys of ``ENCODERS``) this architecture is built with."""
    has_reconstruction_decoder: bool
    """A pretraining-only decoder exists (``decoder_num_layers >= 1``); it is dropped on export."""
    encoder_mlm_head: bool
    """An MLM head reads the encoder output directly (an HF ``...ForMaskedLM`` target exists)."""
    build_model: LazyRef
    """``(run_cfg, *, vocab_size, max_sequence_length, use_te, attention, pre_process, post_process) -> module``
    (``attention``: the run's ``models.attention_plan.AttentionPlan``)."""
    dataset_class: LazyRef
    """The ``MegatronDataset`` class of the real data (``dataset_class.get()``)."""
    make_sample: LazyRef
    """``(masking_cfg, index, tokens, TokenIds) -> sample dict``: pure numpy, shared by data and benchmarks."""
    forward_step: LazyRef
    """``(device, data_iterator, model) -> (output, loss_func)`` for megatron's schedules."""
    flops: LazyRef
    """``(run_cfg) -> forward+backward model FLOPs per packed sequence``."""
    pipeline_shape: LazyRef
    """``(run_cfg) -> (seq_length, micro_batch)`` of the tensor sent between pipeline stages."""
    supervised_tokens: LazyRef
    """``(run_cfg) ->`` tokens with a reconstruction loss per packed sequence (benchmarks)."""
    attention_calls: LazyRef = LazyRef("megatron_crossbert.arch_rules:full_attention_calls")
    """``(run_cfg) -> tuple[AttentionCall, ...]``: each kind of core-attention call of a training step (its
    shapes: what compiled FlexAttention makes one kernel for)."""
    gemm_rows: LazyRef = LazyRef("megatron_crossbert.arch_rules:full_gemm_rows")
    """``(run_cfg) -> {description naming the fields: rows}`` of the Transformer Engine GEMMs of a micro-batch
    (FP8 needs rows divisible by 8)."""
    check_run: LazyRef = LazyRef("megatron_crossbert.arch_rules:no_check")
    """``(run_cfg) -> None``: cross-section checks of a RunConfig for this architecture (raises ValueError)."""
    uses_views: bool = False
    """Samples carry visible/target views, so ``masking.mask_ratio`` and ``num_views`` apply."""
    whiten_frozen_features: bool = False
    """Evaluation reads its frozen pooled features through PCA whitening by default (``evaluation/whitening.py``).
    On for all three: CrossBERT's encoder, read only through the decoder's cross-attention, collapses onto a few
    directions, BERT's less so, and whitening lifts both (docs/results.md, "Frozen features"); the same readout for every
    architecture keeps the claims study's comparisons like for like. Foreign models keep their own recipe."""


_MLM_COMMON = dict(dataset_class=LazyRef("megatron_crossbert.data.datasets.dataset:BertDataset"),
                   make_sample=LazyRef("megatron_crossbert.arch_rules:mlm_sample"),
                   pipeline_shape=LazyRef("megatron_crossbert.arch_rules:full_pipeline_shape"),
                   supervised_tokens=LazyRef("megatron_crossbert.arch_rules:mlm_supervised"),
                   forward_step=LazyRef("megatron_crossbert.training.steps:mlm_forward_step"),
                   flops=LazyRef("megatron_crossbert.models.flops:mlm_flops_per_sample"))

REGISTRY: dict[str, ArchSpec] = {spec.name: spec for spec in (
    ArchSpec(name="crossbert", description="CrossBERT encoder", encoders=("classic", "modern"),
             has_reconstruction_decoder=True, encoder_mlm_head=False, uses_views=True, whiten_frozen_features=True,
             build_model=LazyRef("megatron_crossbert.models.crossbert:build_crossbert_model"),
             dataset_class=LazyRef("megatron_crossbert.data.datasets.dataset:CrossBertDataset"),
             make_sample=LazyRef("megatron_crossbert.arch_rules:crossbert_sample"),
             pipeline_shape=LazyRef("megatron_crossbert.arch_rules:views_pipeline_shape"),
             supervised_tokens=LazyRef("megatron_crossbert.arch_rules:views_supervised"),
             check_run=LazyRef("megatron_crossbert.arch_rules:check_views"),
             attention_calls=LazyRef("megatron_crossbert.arch_rules:views_attention_calls"),
             gemm_rows=LazyRef("megatron_crossbert.arch_rules:views_gemm_rows"),
             forward_step=LazyRef("megatron_crossbert.training.steps:crossbert_forward_step"),
             flops=LazyRef("megatron_crossbert.models.flops:crossbert_flops_per_sample")),
    ArchSpec(name="bert", description="BERT baseline (megatron-core BertModel)", encoders=("classic",),
             has_reconstruction_decoder=False, encoder_mlm_head=True, whiten_frozen_features=True,
             build_model=LazyRef("megatron_crossbert.models.bert_baseline:build_bert_model"), **_MLM_COMMON),
    ArchSpec(name="mlm", description="MLM baseline (modern encoder + ModernBERT MLM head)",
             encoders=("modern",), has_reconstruction_decoder=False, encoder_mlm_head=True, whiten_frozen_features=True,
             build_model=LazyRef("megatron_crossbert.models.mlm:build_mlm_model"), **_MLM_COMMON),
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
