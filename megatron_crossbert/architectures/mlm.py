"""The MLM baseline: the modern encoder module with a ModernBERT-style MLM head, 80/10/10 masking; its forward
step serves every masked-LM architecture (``bert`` subclasses it)."""

from __future__ import annotations

from functools import partial

import torch

from megatron_crossbert.arch import get_arch
from megatron_crossbert.architectures.spec import TrainSpec, loss_func, to_device
from megatron_crossbert.models.mlm import build_mlm_model


class MlmSpec(TrainSpec):
    """Masked-LM samples over the whole sequence; the model returns the per-token LM loss."""

    arch = get_arch("mlm")

    def build_model(self, run_cfg, **parts) -> torch.nn.Module:
        return build_mlm_model(run_cfg, **parts)

    def forward_step(self, device: torch.device, data_iterator, model):
        """MLM baselines (megatron-core BertModel, MlmModel) return the per-token LM loss given lm_labels;
        the loss mask is also where they predict (sparse prediction, unless ``model.sparse_prediction`` is off).

        Packed samples have no padding: attention is masked by the samples' documents (``segments``) when
        document masks are on, else unmasked (no all-ones mask, which would force a dense-mask kernel)."""
        batch = to_device(next(data_iterator), device)
        output = model(batch["tokens"], None, lm_labels=batch["labels"], prediction_mask=batch["loss_mask"],
                       segments=batch.get("segments"))
        return output, partial(loss_func, batch["loss_mask"])


TRAIN_SPEC = MlmSpec()
