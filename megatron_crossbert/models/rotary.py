"""RoPE at arbitrary positions: per-row rotary frequencies, and a decoder layer whose cross-attention uses them.

CrossBERT's encoder sees each view's visible tokens at their *original* positions, so the rotary
frequencies differ per row: ``[s, b, 1, d]`` instead of megatron's usual ``[s, 1, 1, d]``. megatron's
unfused RoPE (``_apply_rotary_pos_emb_bshd``) broadcasts over that shape; TE's fused kernel in bshd
layout only takes one frequency row per position (megatron itself falls back for mRoPE with b > 1), so
the modern family runs with ``apply_rope_fusion=False`` (``transformer_config._family_fields``).

megatron-core 0.19's ``TransformerLayer`` calls ``cross_attention`` without any ``rotary_pos_emb``, so
the keys of cross-attention would carry no position. ``RotaryDecoderLayer`` takes the block's
``rotary_pos_emb=(query_freqs, key_freqs)`` (targets, visible memory): self-attention rotates queries
and keys at the target positions, cross-attention rotates queries at the targets and keys at the
visible positions. It hands the pair to its ``RotaryCrossAttention`` for exactly one forward.

A decoder narrower than the encoder (width d < h): ``RotaryCrossAttention(memory_size=h)`` builds its
key/value projection h -> 2d, so the projection of the encoder output *is* ``linear_kv``: column
parallel (TP shards it, SP gathers the memory as for any input), no extra module or checkpoint key.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import torch
from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
from megatron.core.transformer.attention import CrossAttention
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.transformer_layer import TransformerLayer
from torch import Tensor


class RowRotary(torch.nn.Module):
    """Rotary frequencies at given positions: ``positions [b, s] -> [s, b, 1, d]`` (float32).

    The inverse frequencies come from megatron's ``RotaryEmbedding`` (full rotary dim, non-interleaved
    halves, as HF ModernBert); only the per-row gather is ours. They are a plain float32 attribute,
    not a buffer, as in megatron: ``model.bfloat16()`` must not round them (a bf16 inverse frequency
    is off by ~0.4%, i.e. radians at position 1000), and nothing is saved in checkpoints.
    """

    def __init__(self, config: TransformerConfig, rotary_base: float) -> None:
        super().__init__()
        rope = RotaryEmbedding(kv_channels=config.kv_channels, rotary_percent=1.0, rotary_base=rotary_base,
                               use_cpu_initialization=True)
        self.inv_freq = rope.inv_freq.float()

    def forward(self, positions: Tensor) -> Tensor:
        if self.inv_freq.device != positions.device:
            self.inv_freq = self.inv_freq.to(positions.device)
        angles = positions.transpose(0, 1).float()[..., None] * self.inv_freq
        return torch.cat((angles, angles), dim=-1)[:, :, None, :]


def _reading(builder, input_size: int, _layer_input_size: int, output_size: int, **kwargs):
    """``builder`` with its input size replaced: megatron builds ``linear_kv`` from the layer's width."""
    return builder(input_size, output_size, **kwargs)


class RotaryCrossAttention(CrossAttention):
    """megatron CrossAttention that applies the (query, key) frequencies its layer set for this forward.

    ``memory_size``: the width of the memory it attends to (the encoder's hidden size) when it differs
    from the layer's own; keys and values are projected from that width.
    """

    pending_rotary: tuple[Tensor, Tensor] | None = None

    def __init__(self, config: TransformerConfig, submodules, layer_number: int, memory_size: int | None = None,
                 **kwargs) -> None:
        if memory_size is not None and memory_size != config.hidden_size:
            submodules = dataclasses.replace(submodules, linear_kv=partial(_reading, submodules.linear_kv,
                                                                           memory_size))
        super().__init__(config, submodules, layer_number, **kwargs)

    def forward(self, hidden_states, attention_mask, key_value_states=None, inference_context=None, **kwargs):
        kwargs.setdefault("rotary_pos_emb", self.pending_rotary)
        return super().forward(hidden_states, attention_mask, key_value_states=key_value_states,
                               inference_context=inference_context, **kwargs)


class RotaryDecoderLayer(TransformerLayer):
    """A decoder layer (self-attn, cross-attn, MLP) whose cross-attention keys are rotated too.

    ``rotary_pos_emb`` is ``None`` (classic: no rotary anywhere) or ``(target_freqs, memory_freqs)``.
    """

    def _forward_attention(self, *args, rotary_pos_emb=None, **kwargs):
        if rotary_pos_emb is None:
            return super()._forward_attention(*args, **kwargs)
        queries, keys = rotary_pos_emb
        self.cross_attention.pending_rotary = (queries, keys)
        try:
            return super()._forward_attention(*args, rotary_pos_emb=(queries, queries), **kwargs)
        finally:
            self.cross_attention.pending_rotary = None


class KindRotary(torch.nn.Module):
    """Per-row RoPE of both layer kinds: ``[s, b, 1, d]``, or ``[2, s, b, 1, d]`` (0 = global, 1 = local)
    when local layers rotate with their own base (ModernBERT: global 160000, local 10000).

    megatron's ``TransformerBlock`` hands one ``rotary_pos_emb`` to every layer, so both kinds travel
    stacked and each layer keeps its slice (``pick_rotary``). A single tensor, or a (query, key) pair of
    them for the decoder, survives megatron's activation recompute (``recompute.py`` unpacks 2-tuples
    only), which a dict or a 4-tuple would not.
    """

    def __init__(self, config: TransformerConfig, global_base: float, local_base: float | None = None) -> None:
        super().__init__()
        self.global_rotary = RowRotary(config, global_base)
        self.local_rotary = None if local_base in (None, global_base) else RowRotary(config, local_base)

    def forward(self, positions: Tensor) -> Tensor:
        freqs = self.global_rotary(positions)
        if self.local_rotary is None:
            return freqs
        return torch.stack((freqs, self.local_rotary(positions)))


def pick_rotary(rotary, local: bool):
    """This layer's frequencies from what the block passed (None, a tensor, or a (query, key) pair)."""
    if rotary is None:
        return None
    if isinstance(rotary, (tuple, list)):
        return tuple(pick_rotary(part, local) for part in rotary)
    return rotary[int(local)] if rotary.dim() == 5 else rotary


def _is_local(layer: TransformerLayer) -> bool:
    """A layer's kind is its core attention's (``attention_windows`` owns the rule); a decoder layer of
    cross-attention alone has no self-attention to ask, and its cross-attention is of the same kind."""
    attention = layer.self_attention if hasattr(layer.self_attention, "core_attention") else layer.cross_attention
    return getattr(attention.core_attention, "half_window", 0) > 0


class LocalGlobalLayer(TransformerLayer):
    """An encoder layer that rotates with the RoPE frequencies of its kind (local or global)."""

    def _forward_attention(self, *args, rotary_pos_emb=None, **kwargs):
        return super()._forward_attention(*args, rotary_pos_emb=pick_rotary(rotary_pos_emb, _is_local(self)),
                                          **kwargs)


class LocalGlobalDecoderLayer(RotaryDecoderLayer):
    """The decoder layer (self-attn, cross-attn with rotated keys, MLP) with its kind's frequencies."""

    def _forward_attention(self, *args, rotary_pos_emb=None, **kwargs):
        return super()._forward_attention(*args, rotary_pos_emb=pick_rotary(rotary_pos_emb, _is_local(self)),
                                          **kwargs)
