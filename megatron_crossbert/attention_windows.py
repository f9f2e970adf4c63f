"""Which layers attend locally, and how far: ModernBERT's rule with ModernBERT's names (torch-free).

ModernBERT (``FlexBertUnpadRopeAttention`` in AnswerDotAI/ModernBERT; HF ``ModernBertConfig``) makes
layer ``i`` (0-based) global when ``i % global_attn_every_n_layers == 0`` and local otherwise. A local
layer lets a query see the keys whose distance is at most ``local_attention // 2`` (HF
``sliding_window``, flash-attn ``window_size=(w // 2, w // 2)``, both ends inclusive).
``local_attention = 0`` means every layer is global.

This module is the one owner of that rule: the core attention asks it for its layer's half window
(megatron's ``layer_number`` is 1-based and already offset by the pipeline stage), the layer asks it
which RoPE base to use, the FLOPs model asks it which layers are windowed, and the HF export writes
``layer_types`` from it. Distances are measured in ORIGINAL positions of the packed sample (the
token coordinates carry them), so CrossBERT's encoder over the visible tokens and its decoder over the
targets use the same window as an MLM encoder over all tokens.
"""

from __future__ import annotations

GLOBAL = "full_attention"
LOCAL = "sliding_attention"
"""HF ``ModernBertConfig.layer_types`` values."""


def check_window_options(local_attention: int, global_attn_every_n_layers: int) -> None:
    """ValueError naming the option when the pair cannot describe ModernBERT-style attention."""
    if local_attention < 0 or local_attention % 2:
        raise ValueError(f"model.local_attention={local_attention} must be 0 (off) or a positive even number of "
                         "tokens (ModernBERT uses 128)")
    if global_attn_every_n_layers < 1:
        raise ValueError(f"model.global_attn_every_n_layers={global_attn_every_n_layers} must be >= 1")


def is_global_layer(index: int, local_attention: int, global_attn_every_n_layers: int) -> bool:
    """Layer ``index`` (0-based, whole stack) attends globally: windows off, or ``index % n == 0``."""
    return local_attention == 0 or index % global_attn_every_n_layers == 0


def layer_half_windows(num_layers: int, local_attention: int, global_attn_every_n_layers: int) -> tuple[int, ...]:
    """Largest allowed ``|position_q - position_k|`` of every layer (0-based); 0 means global."""
    check_window_options(local_attention, global_attn_every_n_layers)
    return tuple(0 if is_global_layer(i, local_attention, global_attn_every_n_layers) else local_attention // 2
                 for i in range(num_layers))


def hf_layer_types(num_layers: int, local_attention: int, global_attn_every_n_layers: int) -> list[str]:
    """``ModernBertConfig.layer_types`` of this stack (what the export writes)."""
    return [GLOBAL if half == 0 else LOCAL
            for half in layer_half_windows(num_layers, local_attention, global_attn_every_n_layers)]


def every_n_of_layer_types(layer_types: list[str], local_attention: int) -> int:
    """Inverse of ``hf_layer_types``: the ``n`` of a global-every-n pattern (1 when all global);
    ValueError when ``layer_types`` is not such a pattern starting with a global layer."""
    layers = len(layer_types)
    if all(kind == GLOBAL for kind in layer_types):
        return 1
    globals_ = [i for i, kind in enumerate(layer_types) if kind == GLOBAL]
    every = globals_[1] if len(globals_) > 1 else layers
    if not globals_ or layer_types != hf_layer_types(layers, local_attention, every):
        raise ValueError(f"layer_types {layer_types} is not a global-every-n-layers pattern starting with a "
                         "global layer (the only local/global layout the native encoder has)")
    return every
