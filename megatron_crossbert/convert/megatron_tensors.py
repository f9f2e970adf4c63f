"""Tensor layout helpers: megatron's head-interleaved fused QKV and tensor-parallel shards.

Megatron's ``linear_qkv`` output rows are grouped per attention head: for head ``n`` the rows are
``[q_n (head_dim), k_n (head_dim), v_n (head_dim)]``, i.e. the tensor is ``[heads, 3, head_dim, ...]``
flattened. Splitting it with ``chunk(3)`` silently scrambles heads (max diff ~5 on a tiny model), so
the split and its inverse live here and nowhere else. With tensor parallelism each rank holds a
contiguous block of whole heads, so concatenating shards along ``partition_dim`` first gives the
TP=1 layout and the same split applies. A gated (GeGLU) ``linear_fc1`` is the exception: each rank
holds a slice of both halves, ``[gate_r | up_r]``, so its shards are gathered half by half.
"""

from __future__ import annotations

import torch

from megatron_crossbert.convert.errors import ConversionError
from megatron_crossbert.convert.keymap import GATED_FC1, RECONSTRUCTION_PREFIXES, TP_PARTITION_DIMS, layer_template


def split_qkv(fused: torch.Tensor, num_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused ``[3h, ...]`` QKV weight or bias -> (q, k, v), each ``[h, ...]`` (multi-head attention only)."""
    rows, rest = fused.shape[0], fused.shape[1:]
    if rows % (3 * num_heads):
        raise ConversionError(f"fused QKV has {rows} rows, not a multiple of 3 * {num_heads} heads")
    head_dim = rows // (3 * num_heads)
    blocks = fused.reshape(num_heads, 3, head_dim, *rest)
    return tuple(blocks[:, part].reshape(num_heads * head_dim, *rest).clone() for part in range(3))


def merge_qkv(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Inverse of ``split_qkv``: separate ``[h, ...]`` q/k/v -> megatron's head-interleaved ``[3h, ...]``."""
    if not query.shape == key.shape == value.shape:
        raise ConversionError(f"q/k/v shapes differ: {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    rows, rest = query.shape[0], query.shape[1:]
    if rows % num_heads:
        raise ConversionError(f"query has {rows} rows, not divisible by {num_heads} heads")
    head_dim = rows // num_heads
    parts = [t.reshape(num_heads, 1, head_dim, *rest) for t in (query, key, value)]
    return torch.cat(parts, dim=1).reshape(3 * rows, *rest).contiguous()


def partition_dim(key: str) -> int | None:
    """TP partition dim of a megatron key (None = replicated), from the literal ``TP_PARTITION_DIMS`` table."""
    template, _ = layer_template(key)
    return TP_PARTITION_DIMS.get(template)


def _gather_gated(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Per-rank ``[gate_r | up_r]`` fc1 shards -> ``[gate | up]`` (each half concatenated over ranks)."""
    halves = [t.chunk(2, dim=0) for t in tensors]
    return torch.cat([torch.cat([h[0] for h in halves]), torch.cat([h[1] for h in halves])])


def gather_tensor_parallel(shards: list[dict[str, torch.Tensor]], *,
                           gated_mlp: bool = False) -> dict[str, torch.Tensor]:
    """Per-TP-rank state dicts (rank order) -> one TP=1 state dict of the exportable tensors.

    Sharded tensors are concatenated along their partition dim; replicated ones must agree across
    ranks (a mismatch means the shards do not belong together). ``gated_mlp`` (the encoder family's
    ``arch.EncoderFamily.gated_mlp``) gathers ``linear_fc1`` half by half. The discarded CrossBERT
    branch and ``_extra_state`` entries are skipped.
    """
    if not shards:
        raise ConversionError("no tensor-parallel shards given")
    merged: dict[str, torch.Tensor] = {}
    for key in shards[0]:
        if key.endswith("_extra_state") or key.startswith(RECONSTRUCTION_PREFIXES):
            continue
        tensors = [shard[key] for shard in shards]
        dim = partition_dim(key)
        if gated_mlp and layer_template(key)[0] in GATED_FC1:
            merged[key] = _gather_gated(tensors)
        elif dim is not None:
            merged[key] = torch.cat(tensors, dim=dim)
        elif all(torch.equal(tensors[0], t) for t in tensors[1:]):
            merged[key] = tensors[0]
        else:
            raise ConversionError(f"replicated tensor {key} differs between tensor-parallel ranks")
    return merged
