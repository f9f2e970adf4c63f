"""The BERT baseline: megatron-core's own ``BertModel`` (classic encoder), 80/10/10 masking, the MLM step."""

from __future__ import annotations

import torch

from megatron_crossbert.arch import get_arch
from megatron_crossbert.architectures.mlm import MlmSpec
from megatron_crossbert.models.bert_baseline import build_bert_model


class BertSpec(MlmSpec):
    """MLM's samples, dataset and forward step; megatron-core's ``BertModel`` as the model."""

    arch = get_arch("bert")

    def build_model(self, run_cfg, **parts) -> torch.nn.Module:
        return build_bert_model(run_cfg, **parts)


TRAIN_SPEC = BertSpec()
