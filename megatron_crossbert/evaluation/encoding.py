"""How a frozen encoder is run at probe time, and which of its tensors is pooled (``EncodingOptions``).

The default reads what a user of the HF export reads: every token of a text, the encoder's output after its
final norm (``last_hidden_state``). Two other readings explain what a probe of that output sees:

- **visibility**: CrossBERT's encoder is trained on a random half of each sequence's tokens at their original
  positions, never on a whole one. ``visible_fraction < 1`` encodes each text that way: a seeded random subset
  of its real tokens stays visible and the rest are hidden from attention (as keys) and from pooling. Hiding a
  token only from attention keeps every visible token at its original position id (the position ids of an HF
  encoder come from the token ids or from the index, never from the attention mask), so the visible tokens see
  exactly what the encoder would compute on the visible subset alone. The subset is drawn uniformly over all
  real tokens, [CLS] and [SEP] included: complementary views pin no position in training either.
  ``masking.visible_length`` (the training rule) sets its size, at least one token.
- **which tensor**: after the final norm, before it (the last layer's output), or a middle layer's output
  (``hidden_states[num_layers // 2]``). HF models record ``hidden_states`` as each layer's output, the last one
  replaced by ``last_hidden_state`` unless told not to (``untie_last_hidden_state``); a model with no final norm
  has nothing before it to read, and is refused.

Features read another way are another model's features: ``identity`` joins the encoder's identity, so the
feature cache keeps them apart.
"""

from __future__ import annotations

import typing
import zlib
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np
import torch

HiddenState = Literal["after_final_norm", "before_final_norm", "middle_layer"]
"""Which tensor is pooled: ``last_hidden_state`` (after the encoder's final norm, the default), the last
layer's output before that norm, or the output of layer ``num_layers // 2``."""
HIDDEN_STATES: tuple[str, ...] = typing.get_args(HiddenState)


@dataclass(frozen=True)
class EncodingOptions:
    """How the encoder sees each text and which of its tensors is pooled; the default is the usual protocol."""

    visible_fraction: float = 1.0
    """Share of each text's real tokens the encoder sees, the rest hidden from attention and pooling, the
    visible ones at their original positions (CrossBERT's training input); 1.0: every token."""
    hidden_state: HiddenState = "after_final_norm"
    """The tensor pooled (``HiddenState``)."""
    seed: int = 0
    """Seed of the visible subsets (each text's subset depends on this seed and the text only)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.visible_fraction <= 1.0:
            raise ValueError(f"EncodingOptions.visible_fraction must be in (0, 1], got {self.visible_fraction}")
        if self.hidden_state not in HIDDEN_STATES:
            raise ValueError(f"EncodingOptions.hidden_state must be one of {', '.join(HIDDEN_STATES)}, "
                             f"got {self.hidden_state!r}")

    @property
    def is_default(self) -> bool:
        return self.visible_fraction == 1.0 and self.hidden_state == "after_final_norm"

    @property
    def identity(self) -> str:
        """What joins the encoder's identity (empty for the default, so existing caches stay valid)."""
        if self.is_default:
            return ""
        visible = f"+visible={self.visible_fraction:g}:seed={self.seed}" if self.visible_fraction < 1.0 else ""
        hidden = "" if self.hidden_state == "after_final_norm" else f"+hidden={self.hidden_state}"
        return visible + hidden


def text_seed(seed: int, text: str) -> list[int]:
    """The generator seed of one text's visible subset: the options' seed and the text (not its batch)."""
    return [int(seed), zlib.crc32(text.encode("utf-8", "surrogatepass"))]


def visible_mask(attention_mask: torch.Tensor, texts: Sequence[str], fraction: float, seed: int) -> torch.Tensor:
    """``attention_mask [b, s]`` with all but a seeded ``fraction`` of each row's real tokens set to 0."""
    from megatron_crossbert.masking import visible_length

    keep = torch.zeros_like(attention_mask)
    for row, text in enumerate(texts):
        real = attention_mask[row].nonzero().flatten().cpu().numpy()
        count = max(1, visible_length(len(real), 1.0 - fraction))
        chosen = np.random.default_rng(text_seed(seed, text)).choice(len(real), size=count, replace=False)
        keep[row, torch.as_tensor(real[chosen], device=keep.device)] = 1
    return keep


def untie_last_hidden_state(model: torch.nn.Module, options: EncodingOptions) -> None:
    """Before the final norm, ask the HF model for its last layer's own output: transformers replaces
    ``hidden_states[-1]`` with ``last_hidden_state`` (after the norm) unless the config's
    ``tie_last_hidden_states`` is False (its switch for models read before their last norm)."""
    if options.hidden_state == "before_final_norm":
        model.config.tie_last_hidden_states = False


def pick_hidden_state(output, hidden_state: str, num_layers: int, what: str) -> torch.Tensor:
    """The ``[b, s, h]`` tensor ``hidden_state`` names from an HF encoder's output (run with
    ``output_hidden_states`` unless the default); ValueError naming ``what`` when the model has no final norm."""
    if hidden_state == "after_final_norm":
        return output.last_hidden_state
    states = output.hidden_states
    if hidden_state == "middle_layer":
        return states[num_layers // 2]
    if torch.equal(states[-1], output.last_hidden_state):
        raise ValueError(f"{what}: hidden_state=before_final_norm reads the same tensor as after_final_norm "
                         "(the model has no final norm after its last layer)")
    return states[-1]
