"""One core-attention module for megatron-core's ``core_attention`` slot: torch SDPA, FlexAttention, or
megatron's own ``DotProductAttention`` as the reference.

It fits both layer specs (local and Transformer Engine): ``SelfAttention``/``CrossAttention`` call
``submodules.core_attention(config=, layer_number=, attn_mask_type=, attention_type=, cp_comm_type=,
softmax_scale=, pg_collection=)`` (megatron-core 0.19.2 ``transformer/attention.py:382``) and then
``forward(query, key, value, attention_mask, attn_mask_type=, attention_bias=, packed_seq_params=)``
with ``query [sq, b, np, hn]``, ``key/value [sk, b, ng, hn]`` (heads already split per TP rank, the
sequence already all-gathered under sequence parallelism) and expect ``[sq, b, np * hn]`` back. The
spec slot takes a callable, so specs pass ``functools.partial(CoreAttention, options=...)``. In the TE
spec this replaces only ``TEDotProductAttention``: TE keeps its fused LayerNorm+QKV and FP8 linears.

``attention_mask`` is what the model passed to megatron's block, untouched by megatron:
- None: no mask (SDPA then runs its unmasked flash/cuDNN kernels);
- integer token coordinates (``attention_masks``): document ids and original positions, from which this
  module derives the mask of ITS layer (global, or local with the layer's window) once per forward
  and per window, shared by every layer through a small cache keyed on the coordinates tensor;
- a bool tensor in megatron's convention (True = masked out), e.g. megatron BertModel's own masks.

The backend is resolved once per run (``resolve_backend``, called by ``models.attention_setup``); the
training loop prints the decision on its first line.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F
from megatron.core import tensor_parallel
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.module import MegatronModule
from torch import Tensor

from megatron_crossbert.config import ATTENTION_KERNELS
from megatron_crossbert.models.attention_masks import dense_keep, flex_mask_mod, ranges_for

BACKENDS = ATTENTION_KERNELS
FLEX_CPU_TRAINING = ("model.attention_backend=flex cannot train here: torch's FlexAttention has no backward "
                     "pass on the CPU; use auto or sdpa")


def resolve_backend(requested: str, *, cuda: bool, masked: bool, attention_dropout: float,
                    training: bool) -> tuple[str, str]:
    """The one place a run's attention backend is decided: ``(backend, why)``.

    auto: FlexAttention on a GPU when document masks or windows apply (block-sparse, never an
    ``[s, s]`` mask) and attention dropout is off (flex has none), else SDPA. An explicit flex that
    cannot train is refused in one line (ValueError): on the CPU (torch has no FlexAttention
    backward there) and with attention dropout (also refused by ``ModelConfig``). A model built for
    evaluation or export (``training=False``) of a flex-trained checkpoint runs SDPA on the CPU
    instead: the same function, the same masks.
    """
    if requested not in ("auto", *BACKENDS):
        raise ValueError(f"model.attention_backend must be auto, {', '.join(BACKENDS)}; got {requested!r}")
    if requested == "flex" and attention_dropout > 0 and training:
        raise ValueError(f"model.attention_backend=flex has no attention dropout; set model.attention_dropout=0 "
                         f"(got {attention_dropout}) or use sdpa")
    if requested == "flex" and not cuda:
        if training:
            raise ValueError(FLEX_CPU_TRAINING)
        return "sdpa", "flex requested, but no GPU: evaluation/export runs the same masks on SDPA"
    if requested != "auto":
        return requested, "requested"
    if cuda and masked and attention_dropout == 0:
        return "flex", "auto: GPU with document masks or windows (block-sparse FlexAttention)"
    if cuda and masked:
        return "sdpa", f"auto: attention_dropout={attention_dropout} (flex has none), so SDPA with a dense mask"
    return "sdpa", "auto: " + ("CPU (no FlexAttention backward)" if masked else "no masks apply")


@dataclass(frozen=True)
class AttentionOptions:
    """What every core-attention instance of one stack (encoder or decoder) shares."""

    backend: str = "sdpa"
    """Resolved backend: sdpa | flex | megatron (never auto)."""
    half_windows: tuple[int, ...] = ()
    """Half window of each layer of the stack, 0-based (``attention_windows.layer_half_windows``); () = all
    global."""
    compile_flex: bool | None = None
    """torch.compile flex_attention and its block masks: None = on a GPU only (the CPU runs flex eagerly,
    forward-only, for tests; ``crossbert-bench attention`` compiles it there too)."""
    flex_in_eval: bool = False
    """Run compiled flex in eval mode too (kernel benchmarks time flex itself); off, evaluation (``model.eval()``)
    runs SDPA over the same masks so that padded batches of every length compile nothing (``flex_compile``)."""

    def half_window(self, layer_number: int) -> int:
        """megatron's ``layer_number`` is 1-based and includes the pipeline stage's offset."""
        return self.half_windows[layer_number - 1] if self.half_windows else 0


def uses_flex(options: AttentionOptions, training: bool, compiled: bool) -> bool:
    """Whether a flex-configured layer runs flex in this call, decided by the module's training mode, never by
    grad mode: megatron's activation recompute runs a layer's first forward under ``no_grad`` in training, and
    that forward must take the same kernel as its recompute. In eval mode (evaluation, ``encode()`` with padded
    batches of every length) compiled flex gives way to SDPA over the same masks, so no length compiles a
    kernel; uncompiled (eager) flex compiles nothing and always runs."""
    if options.backend != "flex":
        return False
    return training or options.flex_in_eval or not compiled


class _MaskCache:
    """Masks derived from one coordinates tensor, shared by all layers of a forward (weakly keyed: a freed
    tensor drops its masks; a recomputed chunk gets a fresh detached tensor and rebuilds)."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref, dict]] = {}

    def get(self, coords: Tensor, key: tuple, build):
        self._entries = {k: v for k, v in self._entries.items() if v[0]() is not None}
        ref, masks = self._entries.get(id(coords), (None, None))
        if ref is None or ref() is not coords:
            masks = {}
            self._entries[id(coords)] = (weakref.ref(coords), masks)
        if key not in masks:
            masks[key] = build()
        return masks[key]


_CACHE = _MaskCache()


@lru_cache(maxsize=1)
def _compiled_flex():
    """torch.compile'd flex_attention (GPU): one compiled kernel per shape, built on first use; the shapes a run
    makes are registered against Dynamo's recompile limit (``flex_compile``)."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


@lru_cache(maxsize=1)
def _compiled_block_mask_builder():
    """One torch.compile'd ``create_block_mask`` for the process (its ``_compile=True`` compiled anew at every
    call and is deprecated): one graph per shape, under the same limit as the flex kernels."""
    from torch.nn.attention.flex_attention import create_block_mask

    return torch.compile(create_block_mask, dynamic=False)


def _block_mask(mask_mod, batch: int, sq: int, sk: int, device: torch.device, compile_: bool):
    from torch.nn.attention.flex_attention import create_block_mask

    from megatron_crossbert.models.flex_compile import strict_recompiles

    # device must be given: torch 2.13 defaults to the build's accelerator (cuda) even without a GPU
    if not compile_:
        return create_block_mask(mask_mod, batch, None, sq, sk, device=device)
    with strict_recompiles():
        return _compiled_block_mask_builder()(mask_mod, batch, None, sq, sk, device=device)


def _dense_block_mask(keep: Tensor, sq: int, sk: int, compile_: bool):
    """Block mask of a dense ``[b, 1, sq|1, sk]`` keep mask (megatron-convention inputs)."""
    full = keep.expand(keep.shape[0], 1, sq, sk)
    return _block_mask(lambda b, h, q, kv: full[b, 0, q, kv], keep.shape[0], sq, sk, keep.device, compile_)


@dataclass(frozen=True)
class LayerMasks:
    """One layer's masks for its kernel (all None: unmasked)."""

    keep: Tensor | None = None
    """bool ``[b, 1, sq, sk]`` (SDPA's convention, True = attend) for sdpa and the megatron reference."""
    block: object = None
    """FlexAttention ``BlockMask`` for flex."""
    empty: Tensor | None = None
    """bool ``[b, sq]``: cross-attention rows with no allowed key, widened and zeroed after attention."""


class CoreAttention(MegatronModule):
    """Scaled dot-product attention on ``[s, b, heads, d]`` tensors with this run's backend and masks."""

    def __init__(self, config, layer_number: int, attn_mask_type, attention_type: str,
                 attention_dropout: float | None = None, softmax_scale: float | None = None,
                 cp_comm_type: str | None = None, pg_collection=None, *, options: AttentionOptions) -> None:
        super().__init__(config=config)
        _refuse_unsupported(config)
        self.options, self.layer_number = options, layer_number
        self.half_window = options.half_window(layer_number)
        self.cross = attention_type == "cross"
        self.dropout_p = config.attention_dropout if attention_dropout is None else attention_dropout
        self.softmax_scale = softmax_scale or 1.0 / math.sqrt(config.kv_channels)
        self.reference = None
        if options.backend == "megatron":
            self.reference = DotProductAttention(config, layer_number, attn_mask_type, attention_type,
                                                 attention_dropout, softmax_scale, cp_comm_type, pg_collection)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
                attn_mask_type=None, attention_bias: Tensor | None = None, packed_seq_params=None) -> Tensor:
        if attention_bias is not None or packed_seq_params is not None:
            raise NotImplementedError("CoreAttention takes no attention_bias or packed (THD) sequences; "
                                      "document masks travel as token coordinates in attention_mask")
        masks = self.masks(attention_mask, query.shape[0], key.shape[0], query.shape[1])
        if self.reference is not None:
            mask = None if masks.keep is None else ~masks.keep
            out = self.reference(query, key, value, mask, attn_mask_type=attn_mask_type)
        elif self._flex_now(query):
            out = self._flex(query, key, value, masks.block)
        else:
            out = self._sdpa(query, key, value, masks.keep)
        if masks.empty is not None:
            out = out * (~masks.empty).t()[..., None].to(out.dtype)
        return out

    def masks(self, attention_mask: Tensor | None, sq: int, sk: int, batch: int) -> LayerMasks:
        """What this layer's kernel needs from ``attention_mask``, built once per coordinates tensor and window and
        shared by every layer of the forward (the cache); ``crossbert-bench attention`` times this."""
        if attention_mask is None:
            if self.half_window:
                raise ValueError(f"layer {self.layer_number} is local (window {2 * self.half_window}) but "
                                 "no token coordinates reached its core attention")
            return LayerMasks()
        if attention_mask.dtype == torch.bool:
            return self._bool_masks(attention_mask, sq, sk)
        ranges = _CACHE.get(attention_mask, ("ranges", self.half_window, sq, sk),
                            lambda: ranges_for(attention_mask, sq, sk, self.half_window))
        empty = ranges.empty if self.cross else None
        if self._flex_now(attention_mask):
            block = _CACHE.get(attention_mask, ("block", self.half_window, sq, sk), lambda: _block_mask(
                flex_mask_mod(ranges), batch, sq, sk, attention_mask.device, self._compile_flex(attention_mask)))
            return LayerMasks(block=block, empty=empty)
        keep = _CACHE.get(attention_mask, ("dense", self.half_window, sq, sk), lambda: dense_keep(ranges, sk))
        return LayerMasks(keep=keep, empty=empty)

    def _bool_masks(self, attention_mask: Tensor, sq: int, sk: int) -> LayerMasks:
        """megatron's convention (True = masked out), e.g. BertModel's padding masks; rows with no key
        are widened to every key (and zeroed after attention in cross-attention)."""
        if self.half_window:
            raise ValueError(f"layer {self.layer_number} is local but got a bool mask, which carries no "
                             "positions; pass token coordinates")
        keep = ~attention_mask
        empty = ~keep.any(-1).any(1)                       # [b, sq]; masks broadcast over heads
        keep = keep | empty[:, None, :, None]
        block = None
        if self._flex_now(attention_mask):
            block = _CACHE.get(attention_mask, ("block-dense", sq, sk),
                               lambda: _dense_block_mask(keep, sq, sk, self._compile_flex(attention_mask)))
        return LayerMasks(keep=keep, block=block, empty=empty if self.cross else None)

    def _flex_now(self, like: Tensor) -> bool:
        return uses_flex(self.options, self.training, self._compile_flex(like))

    def _compile_flex(self, like: Tensor) -> bool:
        return like.is_cuda if self.options.compile_flex is None else self.options.compile_flex

    def _dropout(self) -> float:
        return self.dropout_p if self.training else 0.0

    def _sdpa(self, query: Tensor, key: Tensor, value: Tensor, keep: Tensor | None) -> Tensor:
        sq, b = query.shape[:2]
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        with _dropout_rng(self.config, self._dropout()):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=self._dropout(),
                                                 scale=self.softmax_scale, enable_gqa=k.shape[1] != q.shape[1])
        return out.permute(2, 0, 1, 3).reshape(sq, b, -1)

    def _flex(self, query: Tensor, key: Tensor, value: Tensor, block) -> Tensor:
        sq, b = query.shape[:2]
        q, k, v = (t.permute(1, 2, 0, 3).contiguous() for t in (query, key, value))
        if not q.is_cuda and torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
            raise RuntimeError("FlexAttention runs forward-only on the CPU (torch has no CPU backward); "
                               "use model.attention_backend=sdpa to train here")
        out = _flex_call(self._compile_flex(q), q, k, v, block_mask=block, scale=self.softmax_scale,
                         enable_gqa=k.shape[1] != q.shape[1])
        return out.permute(2, 0, 1, 3).reshape(sq, b, -1)


def _flex_call(compiled: bool, *args, **kwargs) -> Tensor:
    """flex_attention, eager or compiled; a compiled call under ``flex_compile.strict_recompiles``."""
    from torch.nn.attention.flex_attention import flex_attention

    from megatron_crossbert.models.flex_compile import strict_recompiles

    if not compiled:
        return flex_attention(*args, **kwargs)
    with strict_recompiles():
        return _compiled_flex()(*args, **kwargs)


def _refuse_unsupported(config) -> None:
    """What megatron's unfused attention supports and this module does not: one line each."""
    if config.context_parallel_size != 1:
        raise ValueError("CoreAttention does not support context parallelism (context_parallel_size > 1)")
    if config.softmax_type != "vanilla":
        raise ValueError(f"CoreAttention supports softmax_type='vanilla' only, got {config.softmax_type!r}")
    if config.apply_query_key_layer_scaling:
        raise ValueError("CoreAttention does not implement apply_query_key_layer_scaling (an fp16-only remedy)")


class _dropout_rng:
    """megatron's dropout RNG discipline (DotProductAttention): the model-parallel stream unless SP."""

    def __init__(self, config, p: float) -> None:
        self.context = None
        if p > 0 and not config.sequence_parallel:
            self.context = tensor_parallel.get_cuda_rng_tracker().fork()

    def __enter__(self):
        return self.context.__enter__() if self.context is not None else None

    def __exit__(self, *exc):
        return self.context.__exit__(*exc) if self.context is not None else False
