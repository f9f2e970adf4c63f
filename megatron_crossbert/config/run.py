"""The run bundle: ``RunConfig`` (the checks that span sections, JSON beside every checkpoint) and
its reading from YAML plus ``section.key=value`` overrides."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from megatron_crossbert.arch import get_arch
from megatron_crossbert.config.checks import _require
from megatron_crossbert.config.data import DataConfig, MaskingConfig
from megatron_crossbert.config.model import ModelConfig
from megatron_crossbert.config.parallel import ParallelConfig
from megatron_crossbert.config.training import CheckpointConfig, TrainingConfig
from megatron_crossbert.fsutil import atomic_write_text


@dataclass
class RunConfig:
    """Everything one pretraining run needs; saved as run_config.json beside each checkpoint."""

    model: ModelConfig = field(default_factory=ModelConfig)
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    data: DataConfig = field(default_factory=DataConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def __post_init__(self) -> None:
        seq, model, tp = self.data.seq_length, self.model, self.parallel.tensor_model_parallel_size
        _require(seq <= model.max_position_embeddings,
                 f"seq_length={seq} does not fit the position table (max_position_embeddings="
                 f"{model.max_position_embeddings}); raise max_position_embeddings or shorten sequences")
        get_arch(model.arch).check_run(self)
        encoder_length = get_arch(model.arch).pipeline_shape(self)[0]
        _require(model.num_attention_heads % tp == 0 and model.dec_heads % tp == 0,
                 f"tensor_model_parallel_size={tp} must divide the attention heads")
        model.padded_vocab_size(tp)  # raises when the padding multiple is not TP-divisible
        self.training.batch_step_schedule(seq)  # raises on a bad batch-size schedule
        _require(model.num_layers % self.parallel.pipeline_model_parallel_size == 0,
                 f"pipeline_model_parallel_size={self.parallel.pipeline_model_parallel_size} must divide "
                 f"num_layers={model.num_layers}")
        _require(not self.parallel.sequence_parallel or (encoder_length % tp == 0 and seq % tp == 0),
                 f"sequence_parallel needs seq_length ({seq}) and the encoder length ({encoder_length}) "
                 f"divisible by TP={tp}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunConfig:
        unknown = set(raw) - {f.name for f in dataclasses.fields(cls)}
        _require(not unknown, f"unknown config sections: {sorted(unknown)}")
        parts = {}
        for f in dataclasses.fields(cls):
            section_cls = f.default_factory  # type: ignore[misc]
            parts[f.name] = _build_section(section_cls, raw.get(f.name) or {}, f.name)
        return cls(**parts)

    def to_json(self) -> str:
        """The text ``save_json`` writes (a checkpoint's checksum record hashes it before it is written)."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def save_json(self, path: str | Path) -> None:
        """Atomically: a checkpoint's run_config.json marks its save complete, so never half-written."""
        atomic_write_text(path, self.to_json())

    @classmethod
    def load_json(cls, path: str | Path) -> RunConfig:
        """A saved run config (a checkpoint's or an export's ``run_config.json``). Fields newer than the
        file take the value that run had, not today's default: a run saved before document masks
        existed records no ``data.document_mask`` and was trained without them."""
        raw = json.loads(Path(path).read_text())
        if isinstance(raw, dict) and isinstance(raw.get("data", {}), dict):
            raw.setdefault("data", {}).setdefault("document_mask", False)
        return cls.from_dict(raw)


def _build_section(section_cls: type, values: dict[str, Any], name: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(section_cls)}
    unknown = set(values) - set(fields)
    _require(not unknown, f"unknown keys in [{name}]: {sorted(unknown)}; valid keys: {sorted(fields)}")
    return section_cls(**{key: _coerce_number(value, fields[key], name) for key, value in values.items()})


def _coerce_number(value: Any, spec: dataclasses.Field, section: str) -> Any:
    """YAML 1.1 reads '3e-4' as a string; numeric fields accept such strings, anything else is an error."""
    annotation = str(spec.type)
    if not isinstance(value, str) or not ("float" in annotation or annotation.startswith("int")):
        return value
    try:
        return float(value) if "float" in annotation else int(value)
    except ValueError:
        raise ValueError(f"{section}.{spec.name} must be a number ({annotation}), got {value!r}") from None


def parse_override(text: str) -> tuple[str, str, Any]:
    """'training.lr=3e-4' -> ('training', 'lr', 0.0003). Values are parsed as YAML scalars/lists."""
    key, sep, value = text.partition("=")
    section, dot, name = key.strip().partition(".")
    _require(bool(sep and dot and section and name),
             f"override {text!r} must look like section.key=value (e.g. training.lr=3e-4)")
    return section, name, yaml.safe_load(value)


def load_run_config(path: str | Path | None = None, overrides: list[str] = ()) -> RunConfig:
    """YAML file (optional) plus 'section.key=value' overrides, validated as a whole."""
    raw: dict[str, Any] = {}
    if path is not None:
        loaded = yaml.safe_load(Path(path).read_text())
        _require(loaded is None or isinstance(loaded, dict), f"{path}: top level must be a mapping of sections")
        raw = loaded or {}
    for text in overrides:
        section, name, value = parse_override(text)
        raw.setdefault(section, {})[name] = value
    return RunConfig.from_dict(raw)
