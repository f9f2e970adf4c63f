"""What every attention of one model does: the backend (resolved once, logged), windows, document masks.

``attention_setup(run_cfg, training=...)`` is the one translation of ``model.attention_backend``,
``model.local_attention``/``global_attn_every_n_layers``/``local_rotary_base`` and
``data.document_mask`` into what the model builders need: an ``AttentionOptions`` per stack (encoder,
decoder: each layer's half window and the backend) and whether the forward passes token coordinates at all.
Without document masks and windows no coordinates are built and SDPA runs its unmasked kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from megatron_crossbert.attention_windows import layer_half_windows
from megatron_crossbert.config import RunConfig
from megatron_crossbert.models.core_attention import AttentionOptions, resolve_backend
from megatron_crossbert.models.flex_compile import flex_shapes, register_flex_shapes


@dataclass(frozen=True)
class AttentionSetup:
    """The attention of one model: per-stack options, document masks, the local RoPE base."""

    encoder: AttentionOptions = field(default_factory=AttentionOptions)
    decoder: AttentionOptions = field(default_factory=AttentionOptions)
    document_mask: bool = False
    """Attention stays inside each document (the forward builds token coordinates from the samples' segments)."""
    local_rotary_base: float | None = None
    """RoPE base of the local layers; None when no layer is local."""
    why: str = ""
    """Why this backend (``resolve_backend``), for the run's log line."""

    @property
    def windowed(self) -> bool:
        return any(self.encoder.half_windows) or any(self.decoder.half_windows)

    @property
    def passes_coords(self) -> bool:
        """The pretraining forward passes token coordinates (documents or windows apply)."""
        return self.document_mask or self.windowed

    def describe(self) -> str:
        """The one log line of a run (the training loop prints it at start)."""
        halves = self.encoder.half_windows
        local = sum(1 for half in halves if half)
        window = 2 * max(halves + self.decoder.half_windows, default=0)
        windows = f"{local} of {len(halves)} encoder layers local (window {window})" if self.windowed else "all global"
        return (f"attention: backend {self.encoder.backend} ({self.why}); document masks "
                f"{'on' if self.document_mask else 'off'}; {windows}")


def attention_backend(run_cfg: RunConfig, *, training: bool) -> tuple[str, str]:
    """``(backend, why)`` of this run (``core_attention.resolve_backend`` over its settings); ValueError (one
    line) when the requested backend cannot train here. It builds and registers nothing, so a run checks it
    before it takes its save directory's lock (``training.setup.check_support``)."""
    model = run_cfg.model
    return resolve_backend(model.attention_backend, cuda=torch.cuda.is_available(),
                           masked=run_cfg.data.document_mask or model.windowed,
                           attention_dropout=model.attention_dropout, training=training)


def attention_setup(run_cfg: RunConfig, *, training: bool) -> AttentionSetup:
    """The attention setup of this run; ValueError (one line) when the requested backend cannot train here."""
    model = run_cfg.model
    document_mask = run_cfg.data.document_mask
    backend, why = attention_backend(run_cfg, training=training)
    windows = dict(local_attention=model.local_attention, global_attn_every_n_layers=model.global_attn_every_n_layers)
    setup = AttentionSetup(
        encoder=AttentionOptions(backend, layer_half_windows(model.num_layers, **windows)),
        decoder=AttentionOptions(backend, layer_half_windows(model.decoder_num_layers, **windows)),
        document_mask=document_mask, local_rotary_base=model.local_rotary_base if model.windowed else None,
        why=why)
    if backend == "flex":  # compiled kernels: one per shape, every shape inside Dynamo's limit
        register_flex_shapes(flex_shapes(run_cfg))
    return setup
