"""Strict state-dict helpers shared by every HF format's adapters (``formats/``).

Adapters are strict on purpose: a native tensor that is neither mapped nor knowingly discarded, a
missing tensor, or a shape that disagrees with the config raises ``ConversionError`` instead of
producing a model that loads but computes garbage. Inputs are TP=1 state dicts (see
``megatron_tensors.gather_tensor_parallel`` for raw shards).
"""

from __future__ import annotations

import torch

from megatron_crossbert.arch import ArchSpec
from megatron_crossbert.convert import keymap
from megatron_crossbert.convert.errors import ConversionError


def clean_megatron(state_dict: dict) -> dict[str, torch.Tensor]:
    """Drop ``_extra_state``/None entries, rename TE fused-norm keys, detach to contiguous CPU copies."""
    out = {}
    for key, value in state_dict.items():
        if key.endswith("_extra_state") or value is None:
            continue
        if not isinstance(value, torch.Tensor):
            raise ConversionError(f"megatron entry {key} is a {type(value).__name__}, not a tensor")
        out[keymap.normalize_te_key(key)] = value.detach().to("cpu").contiguous()
    return out


def take(source: dict[str, torch.Tensor], key: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """Pop ``key`` from ``source`` (a private copy), checking its shape when given."""
    if key not in source:
        raise ConversionError(f"missing tensor {key!r}")
    tensor = source.pop(key)
    if shape is not None and tuple(tensor.shape) != shape:
        raise ConversionError(f"{key} has shape {tuple(tensor.shape)}, config expects {shape}")
    return tensor.clone()


def discarded_prefixes(traits: ArchSpec, with_mlm_head: bool) -> tuple[str, ...]:
    """Native prefixes an export knowingly leaves out: the reconstruction branch, and every LM head
    that is not exported (a decoder's head reads decoder outputs; an inexact encoder head is omitted)."""
    discard = keymap.RECONSTRUCTION_PREFIXES if traits.has_reconstruction_decoder else ()
    return discard + (() if with_mlm_head else keymap.HEAD_PREFIXES)


def reject_leftovers(src: dict, discard: tuple[str, ...], target: str) -> None:
    """Fail on native tensors that were neither mapped nor deliberately discarded."""
    leftover = sorted(key for key in src if not key.startswith(discard))
    if leftover:
        raise ConversionError(f"megatron tensors with no HF {target} target: {leftover[:6]}"
                              f"{' ...' if len(leftover) > 6 else ''}")


def clean_hf(state_dict: dict, base_prefix: str) -> dict[str, torch.Tensor]:
    """Strip the base-model prefix (``bert.``, ``roberta.``...); keep head keys as they are."""
    out = {}
    for key, value in state_dict.items():
        bare = key[len(base_prefix):] if key.startswith(base_prefix) else key
        out[bare] = value.detach().to("cpu").contiguous()
    return out


def check_tied(tensor: torch.Tensor | None, word_embeddings: torch.Tensor, key: str) -> None:
    """A stored output projection must be the word embeddings: both sides tie it, so a different
    tensor has no exact counterpart."""
    if tensor is not None and not torch.equal(tensor, word_embeddings):
        raise ConversionError(f"{key} is not tied to the word embeddings; both megatron's output layer and "
                              "the HF MLM decoder are, so this head has no exact counterpart")


def drop_zero_rows(src: dict, key: str) -> None:
    """Pop an HF tensor our models do not have (token types) that must be all zero to be exact."""
    rows = src.pop(key, None)
    if rows is not None and bool(rows.any()):
        raise ConversionError(f"{key} has non-zero rows; megatron-crossbert models have no token-type "
                              "embeddings, so this model has no exact native equivalent")
