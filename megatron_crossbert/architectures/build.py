"""Build the model chunk of a run: the one entry point training, evaluation and export use.

``build_model`` calls the architecture's builder (``registry.get_train_spec``); which layer implementation (local or
Transformer Engine) a run uses is resolved once, in ``specs.use_transformer_engine``.
"""

from __future__ import annotations

import torch

from megatron_crossbert.architectures.registry import get_train_spec
from megatron_crossbert.config import RunConfig
from megatron_crossbert.models.attention_setup import attention_setup
from megatron_crossbert.models.specs import require_support, use_transformer_engine


def build_model(run_cfg: RunConfig, pre_process: bool = True, post_process: bool = True, *,
                training: bool = False) -> torch.nn.Module:
    """The model chunk of this pipeline stage (megatron parallel state must already be initialised).

    ``training``: the model will be trained here, so an attention backend that cannot train here is
    refused (``attention_setup``); evaluation and export of a flex-trained checkpoint run SDPA on a CPU.

    Embedding rows are padded for the run's TP size. bf16/fp8 runs get all-bf16 parameters (the
    optimizer keeps fp32 main weights), so no Float16Module wrapper is needed: inputs are integer ids
    and the loss is already float32. On a GPU the chunk is moved to the current device.
    """
    model_cfg = run_cfg.model
    require_support(run_cfg.training.precision, model_cfg.transformer_impl)
    use_te = use_transformer_engine(model_cfg)
    common = dict(vocab_size=model_cfg.padded_vocab_size(run_cfg.parallel.tensor_model_parallel_size),
                  max_sequence_length=model_cfg.max_position_embeddings, use_te=use_te,
                  pre_process=pre_process, post_process=post_process,
                  attention=attention_setup(run_cfg, training=training))
    model = get_train_spec(model_cfg.arch).build_model(run_cfg, **common)
    if run_cfg.training.half_precision:
        model = model.bfloat16()          # what megatron's Float16Module would do; norms included
    if torch.cuda.is_available():
        model = model.cuda(torch.cuda.current_device())
    return model

