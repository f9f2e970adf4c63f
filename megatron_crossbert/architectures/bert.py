"""The BERT baseline: megatron-core's own ``BertModel`` (classic encoder), 80/10/10 masking, the MLM step."""

from __future__ import annotations

from megatron_crossbert.arch import get_arch
from megatron_crossbert.arch_rules import SEQUENCE
from megatron_crossbert.architectures.mlm import mlm_forward_step
from megatron_crossbert.architectures.spec import TrainSpec
from megatron_crossbert.data.datasets.dataset import BertDataset
from megatron_crossbert.models.bert_baseline import build_bert_model

TRAIN_SPEC = TrainSpec(arch=get_arch("bert"), layout=SEQUENCE, build_model=build_bert_model,
                       dataset_class=BertDataset, forward_step=mlm_forward_step)
