"""The mask algebra: who may attend to whom, from document ids and original positions (pure torch).

One rule serves every attention in the project (encoder self-attention over the visible tokens, decoder
self-attention among the targets, decoder cross-attention from targets to visible tokens, both MLM
baselines, padded ``encode`` batches):

    query q may attend to key k  <=>  segment[q] == segment[k]  and  (half == 0 or |pos[q] - pos[k]| <= half)

``segment`` is the document (fragment) id of a token, ``pos`` its ORIGINAL position in the packed
sample (so a window is measured in positions, never in visible indices), ``half`` the layer's half
window (``attention_windows``; 0 = global).

Token coordinates
-----------------
Attention receives one integer tensor ``coords [b, 2, n]`` through megatron's ``attention_mask``
argument (megatron hands it to core attention untouched; activation recompute saves it like any
tensor): row 0 holds segment ids, row 1 original positions. Self-attention: ``n = s`` (queries and keys
are the same tokens). Cross-attention: ``n = sq + sk``, queries first. A bool tensor is megatron's own
convention (True = masked out) and carries no coordinates.

Contract: along each row of a coordinates part, segments are non-decreasing and positions increase within
a segment. Sorted visible/target positions and the packed sample's segment ids (``segments``) satisfy
it by construction. Then every query's allowed keys form ONE contiguous index range ``[lo, hi)``, found
with ``torch.searchsorted`` in ``O(sq log sk)``. Dense masks, flex ``mask_mod``s and a row-emptiness
test all derive from those two integers per query, never from an ``[s, s]`` integer tensor.

Empty rows
----------
Self-attention rows are never empty (a token always sees itself). A cross-attention row is empty when
the target's fragment has no visible token within reach in this view (1-token fragments, a fragment
whose tokens are all targets, a window with no visible token). Such a row is given every key (so no
kernel ever sees an all-masked row, no NaN on any backend) and its output is then zeroed: the target
receives nothing from the encoder, exactly, and so depends on no other document. ``empty`` carries that
flag to the core attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

SEGMENT, POSITION = 0, 1
_STRIDE = 1 << 32
"""Segment stride of the sort key ``segment * _STRIDE + position``; positions and windows stay far below it."""


def token_coords(segments: Tensor, positions: Tensor) -> Tensor:
    """``[b, 2, n]`` int64 coordinates of tokens with these segment ids and original positions (both ``[b, n]``)."""
    return torch.stack((segments.to(torch.int64), positions.to(torch.int64)), dim=1)


def cross_coords(query_coords: Tensor, key_coords: Tensor) -> Tensor:
    """Cross-attention coordinates: query tokens then key tokens along the last axis."""
    return torch.cat((query_coords, key_coords), dim=-1)


def padding_coords(keep: Tensor) -> Tensor:
    """Layout of an HF-style padded batch (``keep [b, s]``, 1 = token): positions 0..s-1, one segment per run.

    Real tokens are one run, padding another, so real tokens never see padding and padded query rows
    (whose outputs nobody reads) see only padding. Runs are numbered in order, keeping the contract for
    left and right padding alike.
    """
    keep = keep.to(torch.int64)
    runs = torch.cat((torch.zeros_like(keep[:, :1]), (keep[:, 1:] != keep[:, :-1]).to(torch.int64)), 1).cumsum(1)
    positions = torch.arange(keep.shape[1], device=keep.device).expand_as(keep)
    return token_coords(runs, positions)


def split_coords(coords: Tensor, sq: int, sk: int) -> tuple[Tensor, Tensor]:
    """(query part ``[b, 2, sq]``, key part ``[b, 2, sk]``) of self- or cross-attention coordinates."""
    n = coords.shape[-1]
    if n == sk and sq == sk:
        return coords, coords
    if n == sq + sk:
        return coords[..., :sq], coords[..., sq:]
    raise ValueError(f"a token coordinates tensor of length {n} fits neither self-attention ({sq}x{sk}) nor "
                     f"cross-attention (needs {sq}+{sk})")


def _sort_key(part: Tensor) -> Tensor:
    return part[:, SEGMENT] * _STRIDE + part[:, POSITION]


@dataclass(frozen=True)
class KeyRanges:
    """Per query: the allowed keys are ``lo <= k < hi``; ``empty`` rows were widened to all keys."""

    lo: Tensor
    """int64 ``[b, sq]``."""
    hi: Tensor
    """int64 ``[b, sq]``."""
    empty: Tensor
    """bool ``[b, sq]``: the row had no allowed key (its output must be zeroed)."""


def key_ranges(query_part: Tensor, key_part: Tensor, half: int) -> KeyRanges:
    """Allowed key range of every query under the rule above (``half = 0``: the whole segment)."""
    reach = half if half > 0 else _STRIDE // 2 - 1
    keys = _sort_key(key_part).contiguous()
    queries = _sort_key(query_part).contiguous()
    lo = torch.searchsorted(keys, queries - reach, side="left")
    hi = torch.searchsorted(keys, queries + reach, side="right")
    empty = hi <= lo
    lo = torch.where(empty, torch.zeros_like(lo), lo)
    hi = torch.where(empty, torch.full_like(hi, key_part.shape[-1]), hi)
    return KeyRanges(lo, hi, empty)


def ranges_for(coords: Tensor, sq: int, sk: int, half: int) -> KeyRanges:
    """``key_ranges`` of whole coordinates (self or cross)."""
    query_part, key_part = split_coords(coords, sq, sk)
    return key_ranges(query_part, key_part, half)


def dense_keep(ranges: KeyRanges, sk: int) -> Tensor:
    """bool ``[b, 1, sq, sk]``, True = may attend (torch SDPA's convention); no row is all False."""
    keys = torch.arange(sk, device=ranges.lo.device)
    keep = (keys >= ranges.lo[..., None]) & (keys < ranges.hi[..., None])
    return keep[:, None]


def reference_keep(query_part: Tensor, key_part: Tensor, half: int) -> Tensor:
    """The rule evaluated pair by pair (``[b, sq, sk]``, no empty-row widening): the tests' oracle."""
    same = query_part[:, SEGMENT, :, None] == key_part[:, SEGMENT, None, :]
    if half == 0:
        return same
    distance = (query_part[:, POSITION, :, None] - key_part[:, POSITION, None, :]).abs()
    return same & (distance <= half)


def flex_mask_mod(ranges: KeyRanges):
    """FlexAttention ``mask_mod(b, h, q, kv)`` for these ranges (empty rows already widened)."""
    lo, hi = ranges.lo, ranges.hi

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx >= lo[b, q_idx]) & (kv_idx < hi[b, q_idx])

    return mask_mod


def check_coords(coords: Tensor, sq: int, sk: int) -> None:
    """ValueError when coordinates break the sortedness contract (debug/tests: it syncs with the device)."""
    for name, part in zip(("query", "key"), split_coords(coords, sq, sk)):
        key = _sort_key(part)
        if bool((key[:, 1:] <= key[:, :-1]).any()):
            raise ValueError(f"the {name} part of the token coordinates is not strictly sorted by (segment, position) "
                             "along each row")


def sample_coords(segments: Tensor) -> Tensor:
    """Layout of whole packed samples (MLM baselines): ``segments [b, L]`` at positions 0..L-1."""
    positions = torch.arange(segments.shape[1], device=segments.device).expand_as(segments)
    return token_coords(segments, positions)


def view_coords(segments: Tensor, visible: Tensor, targets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """CrossBERT's (encoder self, decoder self, decoder cross) coordinates of the view rows.

    ``segments [rows, L]`` are the samples' fragment ids (one row per view), ``visible [rows, Lv]`` and
    ``targets [rows, T]`` sorted positions: the views' ids are gathered exactly as their tokens are.
    """
    encoder = token_coords(torch.gather(segments, 1, visible), visible)
    decoder = token_coords(torch.gather(segments, 1, targets), targets)
    return encoder, decoder, cross_coords(decoder, encoder)
