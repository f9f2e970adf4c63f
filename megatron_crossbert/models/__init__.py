"""CrossBERT and the MLM baselines on megatron-core, their layer specs and FLOPs accounting.

The model chunk of a run is built by ``architectures.build.build_model``; README.md maps the modules.
This face defines nothing: it re-exports the names callers import from the package.
"""

from megatron_crossbert.models.attention_setup import AttentionSetup, attention_setup
from megatron_crossbert.models.bert_baseline import BaselineBertModel, bert_encode, build_bert_model
from megatron_crossbert.models.crossbert import CrossBertModel
from megatron_crossbert.models.encoder import model_encode
from megatron_crossbert.models.flops import model_flops_per_sample
from megatron_crossbert.models.mlm import MlmModel
from megatron_crossbert.models.specs import use_transformer_engine
from megatron_crossbert.models.transformer_config import transformer_config

__all__ = ["AttentionSetup", "BaselineBertModel", "CrossBertModel", "MlmModel", "attention_setup", "bert_encode",
           "build_bert_model", "model_encode", "model_flops_per_sample", "transformer_config",
           "use_transformer_engine"]
