"""Typed, validated configuration: one dataclass per concern, plus the run bundle.

Nothing here imports torch or megatron, so configs can be built, validated and saved in any
process. ``RunConfig`` is what gets written next to every checkpoint (``run_config.json``) and what
the YAML files in ``examples/`` hold. Each ``__post_init__`` checks only its own fields; checks that
span concerns (e.g. sequence length against the position table) live in ``RunConfig``.

Import every name from this package face: ``model``, ``data`` (with masking), ``parallel``, ``training``
(with checkpoint) and ``run`` hold one section each, ``checks`` their shared checks.
"""

from megatron_crossbert.config.checks import field_choices
from megatron_crossbert.config.data import DataConfig, MaskingConfig, StripMode, parse_blend
from megatron_crossbert.config.model import ATTENTION_KERNELS, ArchName, AttentionBackend, EncoderName, ModelConfig
from megatron_crossbert.config.parallel import ParallelConfig
from megatron_crossbert.config.run import RunConfig, load_run_config, parse_override, replace_sections
from megatron_crossbert.config.training import CheckpointConfig, TrainingConfig

__all__ = [
    "ATTENTION_KERNELS", "ArchName", "AttentionBackend", "CheckpointConfig", "DataConfig", "EncoderName",
    "MaskingConfig", "ModelConfig", "ParallelConfig", "RunConfig", "StripMode", "TrainingConfig",
    "field_choices", "load_run_config", "parse_blend", "parse_override", "replace_sections",
]
