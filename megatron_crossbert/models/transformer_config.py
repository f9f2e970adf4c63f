"""RunConfig -> megatron-core ``TransformerConfig``: the one translation of our typed configs.

The encoder config carries the real pipeline size (megatron splits its layers across stages). The
decoder config is the same translation with the decoder's dimensions and
``pipeline_model_parallel_size=1``: the reconstruction branch lives whole on the last stage, so
megatron must neither split its layers nor offset their numbers by the stage's rank.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron_crossbert.arch import get_encoder
from megatron_crossbert.config import RunConfig

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp8": torch.bfloat16}
NO_CUDA_GRAPHS = {"cuda_graph_modules": []}
"""No CUDA graphs, in megatron-core's non-deprecated terms: its default ("full") warns at every build that it is
deprecated for an empty list, which means the same. Every TransformerConfig this project builds passes it."""


def _dimensions(run_cfg: RunConfig, decoder: bool) -> dict:
    model = run_cfg.model
    if decoder:
        return dict(num_layers=model.decoder_num_layers, hidden_size=model.dec_hidden,
                    num_attention_heads=model.dec_heads, ffn_hidden_size=model.dec_ffn,
                    pipeline_model_parallel_size=1)
    return dict(num_layers=model.num_layers, hidden_size=model.hidden_size,
                num_attention_heads=model.num_attention_heads, ffn_hidden_size=model.ffn,
                pipeline_model_parallel_size=run_cfg.parallel.pipeline_model_parallel_size)


def _precision(run_cfg: RunConfig) -> dict:
    """bf16 params/activations for bf16 and fp8; fp8 adds TE's hybrid E4M3/E5M2 GEMMs."""
    precision = run_cfg.training.precision
    dtype = _DTYPES[precision]
    out = dict(params_dtype=dtype, pipeline_dtype=dtype, bf16=run_cfg.training.half_precision)
    if precision == "fp8":
        out.update(fp8="hybrid", fp8_recipe=run_cfg.training.fp8_recipe)
    return out


def _recompute(run_cfg: RunConfig) -> dict:
    if not run_cfg.parallel.recompute_activations:
        return {}
    return dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)


def _family_fields(run_cfg: RunConfig) -> dict:
    """The encoder family's traits (``arch.ENCODERS``), in TransformerConfig terms.

    classic: biases everywhere, exact GELU unless ``bias_gelu_fusion`` (megatron's fused tanh-GELU),
    the combination that maps exactly onto HF ``MegatronBertModel``. modern: no linear biases, GeGLU
    (``gated_linear_unit`` + gelu = gelu(first half) * second half, as ModernBERT), and the unfused
    RoPE path: per-row frequencies ``[s, b, 1, d]`` are refused by TE's fused RoPE in bshd layout.
    With an embedding norm, layer 0 has no attention norm, so layers differ and dist-checkpointing
    must key them per layer (``encoder.layers.<i>.``) instead of stacking them along a layer axis.
    """
    model, family = run_cfg.model, get_encoder(run_cfg.model.encoder)
    return dict(add_bias_linear=family.linear_bias, gated_linear_unit=family.gated_mlp,
                bias_activation_fusion=model.bias_gelu_fusion and family.linear_bias,
                apply_rope_fusion=False, hetereogenous_dist_checkpoint=family.embedding_norm)


def transformer_config(run_cfg: RunConfig, decoder: bool = False) -> TransformerConfig:
    """Encoder (``decoder=False``) or reconstruction-decoder TransformerConfig for this run.

    Pre-LN LayerNorm with the family's traits (``_family_fields``); ``calculate_per_token_loss`` matches the
    loss convention of docs/architecture.md.
    """
    model, parallel = run_cfg.model, run_cfg.parallel
    return TransformerConfig(
        **_dimensions(run_cfg, decoder),
        **_precision(run_cfg),
        **_recompute(run_cfg),
        **_family_fields(run_cfg),
        tensor_model_parallel_size=parallel.tensor_model_parallel_size,
        sequence_parallel=parallel.sequence_parallel,
        hidden_dropout=model.hidden_dropout,
        attention_dropout=model.attention_dropout,
        layernorm_epsilon=model.layernorm_epsilon,
        init_method_std=model.init_method_std,
        normalization="LayerNorm",
        activation_func=F.gelu,
        apply_residual_connection_post_layernorm=False,
        use_cpu_initialization=not torch.cuda.is_available(),
        calculate_per_token_loss=True,
        **NO_CUDA_GRAPHS,
    )
