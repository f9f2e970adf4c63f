"""megatron-core layer specs for the CrossBERT encoder, its reconstruction decoder and the baselines.

Both encoder families (``arch.ENCODERS``) use the same pre-LN layer modules; what differs is in the
TransformerConfig (biases, GeGLU) and, for the modern family, the first layer of the first stage: its
attention norm is an identity, because the embedding LayerNorm already normalises its input
(ModernBERT's layer 0). Decoder layers are ``RotaryDecoderLayer``s, whose cross-attention receives
(query, key) rotary frequencies; with no rotary embedding (classic) they are plain TransformerLayers.

Two families: the local spec (megatron-core modules only; runs on CPU and on GPU) and the Transformer
Engine spec (fused LayerNorm+GEMM, FP8-capable; GPU only). Which one a run uses is decided once, in
``use_transformer_engine``; everything else asks it. Transformer Engine is imported lazily so that a
CPU process never touches it (a half-installed TE even breaks ``import megatron.core``).

Every attention of both families and both specs runs ``core_attention.CoreAttention`` in megatron's
``core_attention`` slot (torch SDPA, FlexAttention or megatron's own ``DotProductAttention``, per
``model.attention_backend``); in the TE spec only that slot changes, so TE keeps its fused
LayerNorm+GEMM and FP8 linears. Masks reach it as token coordinates (document ids and original positions,
``attention_masks``) through megatron's ``attention_mask``/``context_mask``; each layer derives its own
(global or windowed) mask. Layers are ``LocalGlobalLayer``/``LocalGlobalDecoderLayer``, which pick their
kind's RoPE frequencies (``rotary``). ``attn_mask_type`` is ``padding`` everywhere: it only tells
megatron that a mask may come; CoreAttention reads the mask itself.
"""

from __future__ import annotations

from functools import partial

import torch
from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer.attention import (
    CrossAttentionSubmodules,
    SelfAttention,
    SelfAttentionSubmodules,
)
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.identity_op import IdentityFuncOp, IdentityOp
from megatron.core.transformer.mlp import MLP, MLPSubmodules
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_block import TransformerBlockSubmodules
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.transformer_layer import TransformerLayerSubmodules

from megatron_crossbert.arch import EncoderFamily
from megatron_crossbert.config import ModelConfig
from megatron_crossbert.models.core_attention import AttentionOptions, CoreAttention
from megatron_crossbert.models.rotary import LocalGlobalDecoderLayer, LocalGlobalLayer, RotaryCrossAttention


FP8_MIN_CAPABILITY = (8, 9)
"""FP8 tensor cores: Ada (8.9), Hopper (9.0) and newer; an A100 (8.0) has none."""


class UnsupportedSettingError(ValueError):
    """A valid setting this machine cannot honour (a ValueError: one line, exit 2 from every CLI)."""


def transformer_engine_problem() -> str | None:
    """Why Transformer Engine cannot be used here; None when it can (never imported without CUDA)."""
    if not torch.cuda.is_available():
        return "no CUDA device is available"
    try:
        import transformer_engine  # noqa: F401
    except Exception as err:  # noqa: BLE001 - a broken TE install raises more than ImportError
        return f"transformer_engine does not import ({type(err).__name__}: {(str(err).splitlines() or [''])[0][:80]})"
    return None


def transformer_engine_available() -> bool:
    """TE is usable only with CUDA present and the package importable (never imported on CPU)."""
    return transformer_engine_problem() is None


def _fp8_device_problem() -> str | None:
    capability = torch.cuda.get_device_capability()
    if tuple(capability) < FP8_MIN_CAPABILITY:
        return (f"{torch.cuda.get_device_name()} (compute capability {capability[0]}.{capability[1]}) has no FP8 "
                f"tensor cores (needs {FP8_MIN_CAPABILITY[0]}.{FP8_MIN_CAPABILITY[1]}+)")
    return None


def support_problems(precision: str, transformer_impl: str) -> list[str]:
    """Every reason (precision, transformer_impl) cannot run as asked here.

    megatron-core's FP8 context is a no-op without TE, and the local spec never runs FP8 GEMMs, so
    fp8 without TE layers would train in bf16 while run_config.json says fp8.
    """
    problems = []
    if transformer_impl == "transformer_engine" or precision == "fp8":
        te = transformer_engine_problem()
        if te is not None:
            setting = "training.precision=fp8" if precision == "fp8" else "model.transformer_impl=transformer_engine"
            problems.append(f"{setting} needs CUDA and an importable Transformer Engine, but {te}")
    if precision == "fp8" and transformer_impl == "local":
        problems.append("training.precision=fp8 runs FP8 GEMMs only in Transformer Engine layers; "
                        "model.transformer_impl=local would silently train in bf16")
    if precision == "fp8" and not problems:
        device = _fp8_device_problem()
        if device is not None:
            problems.append(f"training.precision=fp8: {device}")
    return problems


def require_support(precision: str, transformer_impl: str) -> None:
    """UnsupportedSettingError naming every problem and the way out; silent when all is well.

    Not in ``RunConfig.__post_init__``: configs of fp8 runs must still load on CPU machines (export,
    probe, MTEB), and ``config`` imports no torch. Called where a run is about to build a model:
    ``training.setup.check_support`` and ``architectures.build.build_model``.
    """
    problems = support_problems(precision, transformer_impl)
    if problems:
        raise UnsupportedSettingError("; ".join(problems) + "; use precision bf16 (GPU) or fp32 (CPU), and "
                                      "transformer_impl auto or local")


def use_transformer_engine(model_cfg: ModelConfig) -> bool:
    """The single place that resolves ``transformer_impl`` ('auto' = TE only when CUDA and TE are present)."""
    if model_cfg.transformer_impl == "local":
        return False
    if model_cfg.transformer_impl == "transformer_engine":
        require_support("fp32", "transformer_engine")
        return True
    return transformer_engine_available()


class SequenceParallelLayerNorm(torch.nn.LayerNorm):
    """torch LayerNorm that tolerates sequence parallelism.

    LayerNorm acts per token, so a sequence-sharded input needs no communication in forward; each TP
    rank however sees different tokens, so its weight/bias gradients differ. Tagging the parameters
    with ``sequence_parallel`` makes megatron's ``finalize_model_grads`` all-reduce them across TP,
    exactly as it does for apex/TE norms (megatron's own torch fallback refuses SP instead).
    """

    def __init__(self, config: TransformerConfig, hidden_size: int, eps: float = 1e-5, **_unused) -> None:
        if config.normalization != "LayerNorm":
            raise ValueError(f"only LayerNorm is supported, got {config.normalization}")
        super().__init__(hidden_size, eps=eps)
        for param in self.parameters():
            param.sequence_parallel = config.sequence_parallel


def _local_mlp() -> partial:
    return partial(MLP.as_mlp_submodule,
                   submodules=MLPSubmodules(linear_fc1=ColumnParallelLinear, linear_fc2=RowParallelLinear))


def core_attention(attention: AttentionOptions) -> partial:
    """The ``core_attention`` slot's value: megatron calls it directly (not through ``build_module``)
    with ``(config=, layer_number=, attn_mask_type=, attention_type=, ...)``, so a partial, not a spec."""
    return partial(CoreAttention, options=attention)


def _self_attention(qkv, proj, attention: AttentionOptions) -> ModuleSpec:
    return ModuleSpec(
        module=SelfAttention,
        params={"attn_mask_type": AttnMaskType.padding},
        submodules=SelfAttentionSubmodules(
            linear_qkv=qkv, core_attention=core_attention(attention),
            linear_proj=proj, q_layernorm=IdentityOp, k_layernorm=IdentityOp),
    )


def _cross_attention(q, kv, proj, attention: AttentionOptions, memory_size: int | None = None) -> ModuleSpec:
    return ModuleSpec(
        module=RotaryCrossAttention,
        params={"attn_mask_type": AttnMaskType.padding, "memory_size": memory_size},
        submodules=CrossAttentionSubmodules(
            linear_q=q, linear_kv=kv, core_attention=core_attention(attention), linear_proj=proj),
    )


# Checkpoints are written with TE-style key names for fused norms, as megatron's own BERT/GPT local
# specs do, so a local-spec checkpoint and a TE-spec checkpoint are interchangeable.
_LOCAL_KEYS_MAP = {
    "input_layernorm.": "self_attention.linear_qkv.layer_norm_",
    "pre_mlp_layernorm.": "mlp.linear_fc1.layer_norm_",
}


def local_encoder_layer_spec(attention: AttentionOptions, attention_norm: bool = True) -> ModuleSpec:
    """Pre-LN layer (classic: maps onto HF MegatronBert), bidirectional, megatron-core modules only."""
    return ModuleSpec(module=LocalGlobalLayer, submodules=TransformerLayerSubmodules(
        input_layernorm=SequenceParallelLayerNorm if attention_norm else IdentityOp,
        self_attention=_self_attention(ColumnParallelLinear, RowParallelLinear, attention),
        self_attn_bda=get_bias_dropout_add,
        pre_mlp_layernorm=SequenceParallelLayerNorm,
        mlp=_local_mlp(),
        mlp_bda=get_bias_dropout_add,
        sharded_state_dict_keys_map=dict(_LOCAL_KEYS_MAP),
    ))


def local_decoder_layer_spec(attention: AttentionOptions, memory_size: int | None = None) -> ModuleSpec:
    """The encoder layer plus cross-attention to the encoder output: self-attn, cross-attn, MLP; all pre-LN.

    ``memory_size``: the encoder's width when the decoder is narrower (keys/values project from it).
    """
    layer = local_encoder_layer_spec(attention)
    layer.module = LocalGlobalDecoderLayer
    layer.submodules.pre_cross_attn_layernorm = SequenceParallelLayerNorm
    layer.submodules.cross_attention = _cross_attention(ColumnParallelLinear, ColumnParallelLinear,
                                                        RowParallelLinear, attention, memory_size)
    layer.submodules.cross_attn_bda = get_bias_dropout_add
    return layer


def te_encoder_layer_spec(attention: AttentionOptions, attention_norm: bool = True) -> ModuleSpec:
    """Same layer with TE fused LayerNorm+QKV (plain QKV without the norm) and LayerNorm+FC1 (FP8-capable);
    the core attention is ours (TE's fp8_autocast covers the linears, not SDPA/flex)."""
    from megatron.core.extensions.transformer_engine import (
        TEColumnParallelLinear,
        TELayerNormColumnParallelLinear,
        TERowParallelLinear,
    )

    qkv = TELayerNormColumnParallelLinear if attention_norm else TEColumnParallelLinear
    return ModuleSpec(module=LocalGlobalLayer, submodules=TransformerLayerSubmodules(
        self_attention=_self_attention(qkv, TERowParallelLinear, attention),
        self_attn_bda=get_bias_dropout_add,
        mlp=partial(MLP.as_mlp_submodule, submodules=MLPSubmodules(
            linear_fc1=TELayerNormColumnParallelLinear, linear_fc2=TERowParallelLinear)),
        mlp_bda=get_bias_dropout_add,
    ))


def te_decoder_layer_spec(attention: AttentionOptions, memory_size: int | None = None) -> ModuleSpec:
    """TE decoder layer; the cross-attention LayerNorm stays a separate TENorm (q and kv differ in input)."""
    from megatron.core.extensions.transformer_engine import TEColumnParallelLinear, TENorm, TERowParallelLinear

    layer = te_encoder_layer_spec(attention)
    layer.module = LocalGlobalDecoderLayer
    layer.submodules.pre_cross_attn_layernorm = TENorm
    layer.submodules.cross_attention = _cross_attention(TEColumnParallelLinear, TEColumnParallelLinear,
                                                        TERowParallelLinear, attention, memory_size)
    layer.submodules.cross_attn_bda = get_bias_dropout_add
    return layer


def final_norm(use_te: bool):
    """The block-final LayerNorm class (exported to HF as ``encoder.ln``)."""
    if use_te:
        from megatron.core.extensions.transformer_engine import TENorm

        return TENorm
    return SequenceParallelLayerNorm


def encoder_layer_spec(use_te: bool, attention: AttentionOptions, attention_norm: bool = True) -> ModuleSpec:
    """One encoder layer of the chosen implementation (local or TE)."""
    build = te_encoder_layer_spec if use_te else local_encoder_layer_spec
    return build(attention, attention_norm)


def encoder_block_spec(use_te: bool, num_layers: int, attention: AttentionOptions,
                       family: EncoderFamily | None = None, first_stage: bool = True) -> TransformerBlockSubmodules:
    """Block spec for the layers this pipeline stage builds (caller computes ``num_layers``).

    With an embedding norm (modern) the globally first layer, i.e. layer 0 of the first stage, has
    no attention norm.
    """
    skip_first = bool(family is not None and family.embedding_norm and first_stage)
    layers = [encoder_layer_spec(use_te, attention, attention_norm=not (skip_first and i == 0))
              for i in range(num_layers)]
    return TransformerBlockSubmodules(layer_specs=layers, layer_norm=final_norm(use_te))


def cross_attention_only(layer: ModuleSpec) -> ModuleSpec:
    """``layer`` without self-attention and without its MLP: the pre-LN cross-attention alone. The other
    slots hold megatron-core's identities (``IdentityOp``, ``IdentityFuncOp`` for the bias-dropout-adds), as
    its own specs leave the slots a layer does not use."""
    sub = layer.submodules
    sub.input_layernorm, sub.self_attention, sub.self_attn_bda = IdentityOp, IdentityOp, IdentityFuncOp
    sub.pre_mlp_layernorm, sub.mlp, sub.mlp_bda = IdentityOp, IdentityOp, IdentityFuncOp
    sub.sharded_state_dict_keys_map = {}
    return layer


def decoder_block_spec(use_te: bool, num_layers: int, attention: AttentionOptions,
                       memory_size: int | None = None, cross_only: bool = False) -> TransformerBlockSubmodules:
    """The reconstruction decoder's block; ``memory_size`` = the encoder width its cross-attention reads;
    ``cross_only``: layers of cross-attention alone (``model.decoder_cross_attention_only``)."""
    layer = te_decoder_layer_spec(attention, memory_size) if use_te else local_decoder_layer_spec(attention,
                                                                                                  memory_size)
    if cross_only:
        layer = cross_attention_only(layer)
    return TransformerBlockSubmodules(layer_specs=[layer] * num_layers, layer_norm=final_norm(use_te))
