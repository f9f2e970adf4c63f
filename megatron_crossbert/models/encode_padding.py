"""The one rule for how far ``encode()`` pads a batch's length before running the encoder.

Sequence parallelism splits the sequence over the TP ranks, so the length must divide by TP; FP8 GEMMs in
Transformer Engine need rows divisible by 8 (and the encoder's rows are length x batch), so under FP8 the
length is padded to a multiple of 16, which holds for any batch size. The padding is masked out (an HF mask
of 0) and the output is trimmed back to the batch's own length by the caller.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from megatron_crossbert.config.fp8 import FP8_WIDTH_MULTIPLE


def encode_length_multiple(config) -> int:
    """The multiple ``encode()`` pads lengths to under this megatron ``TransformerConfig``."""
    multiple = config.tensor_model_parallel_size if config.sequence_parallel else 1
    if getattr(config, "fp8", None):
        multiple = math.lcm(multiple, FP8_WIDTH_MULTIPLE)
    return multiple


def pad_length(input_ids: Tensor, attention_mask: Tensor | None, multiple: int) -> tuple[Tensor, Tensor | None]:
    """``input_ids`` and the HF mask right-padded to a multiple of ``multiple`` (the padding masked out)."""
    pad = (-input_ids.shape[1]) % multiple
    if not pad:
        return input_ids, attention_mask
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    return torch.nn.functional.pad(input_ids, (0, pad)), torch.nn.functional.pad(attention_mask, (0, pad))
