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
from megatron_crossbert.config.checks import (_require, coerce, coerce_saved, describe, named_rule, section_hints,
                                              setting)
from megatron_crossbert.config.data import DataConfig, MaskingConfig
from megatron_crossbert.config.fp8 import fp8_shape_problems, gemm_rows
from megatron_crossbert.config.model import ModelConfig
from megatron_crossbert.config.parallel import ParallelConfig
from megatron_crossbert.config.training import CheckpointConfig, TrainingConfig
from megatron_crossbert.fsutil import atomic_write_text
from megatron_crossbert.masking import check_view_shape


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
        seq, model, parallel, training = self.data.seq_length, self.model, self.parallel, self.training
        _require(not training.eval_interval or self.data.split_shares()[1] > 0,
                 f"{setting(training, 'eval_interval')} needs validation documents, but {setting(self.data, 'split')} "
                 "gives validation a 0 share; set training.eval_interval=0 or give the second share a value > 0")
        _require(seq <= model.max_position_embeddings,
                 f"{setting(self.data, 'seq_length')} must be <= {setting(model, 'max_position_embeddings')} (the "
                 "position table); raise max_position_embeddings or shorten sequences")
        named_rule(", ".join((setting(self.data, "seq_length"), setting(self.masking, "mask_ratio"),
                              setting(self.masking, "complementary"))), self._check_views)
        self._check_tensor_parallel()
        model.padded_vocab_size(parallel.tensor_model_parallel_size)  # raises when the multiple is not TP-divisible
        schedule = [setting(training, name) for name in ("step_batch_size_schedule", "rampup_batch_size")
                    if getattr(training, name)]
        schedule += [setting(training, "global_batch_size"), setting(training, "micro_batch_size")]
        named_rule(", ".join(schedule), lambda: training.batch_step_schedule(seq))
        _require(model.num_layers % parallel.pipeline_model_parallel_size == 0,
                 f"{setting(parallel, 'pipeline_model_parallel_size')} must divide {setting(model, 'num_layers')}")
        self._check_fp8_shapes()

    def pipeline_shape(self) -> tuple[int, int]:
        """``(seq_length, micro_batch)`` of the tensor sent between pipeline stages: CrossBERT's stages exchange
        the visible tokens of every view (``[Lv, b*V, h]``), the MLMs' the whole packed sequence (``[L, b, h]``)."""
        seq, mbs = self.data.seq_length, self.training.micro_batch_size
        if get_arch(self.model.arch).uses_views:
            return self.masking.visible_length(seq), mbs * self.masking.num_views
        return seq, mbs

    def _check_views(self) -> None:
        """Fail at config time when the views cannot be drawn (the checks the data will run)."""
        if get_arch(self.model.arch).uses_views:
            check_view_shape(self.data.seq_length, self.masking.mask_ratio, self.masking.complementary)

    def _check_tensor_parallel(self) -> None:
        """TP splits every stack's heads, and under sequence parallelism the encoder's and the sequence's rows."""
        model, parallel, tp = self.model, self.parallel, self.parallel.tensor_model_parallel_size
        tp_setting = setting(parallel, "tensor_model_parallel_size")
        _require(model.num_attention_heads % tp == 0,
                 f"{tp_setting} must divide {setting(model, 'num_attention_heads')}")
        _require(model.dec_heads % tp == 0, f"{tp_setting} must divide the decoder's {model.dec_heads} attention heads "
                                            f"({setting(model, 'decoder_num_attention_heads')})")
        encoder_length = self.pipeline_shape()[0]
        seq = self.data.seq_length
        _require(not parallel.sequence_parallel or (encoder_length % tp == 0 and seq % tp == 0),
                 f"{setting(parallel, 'sequence_parallel')} needs {setting(self.data, 'seq_length')} and the encoder "
                 f"length ({encoder_length}) divisible by {tp_setting}")

    def _check_fp8_shapes(self) -> None:
        """FP8 GEMM shapes, checked with the config (before any Transformer Engine import), so that a CPU dry run
        already refuses them in one line naming the fields (``config.fp8``)."""
        if self.training.precision != "fp8":
            return
        model, spec = self.model, get_arch(self.model.arch)
        keys = ("hidden_size", "ffn_hidden_size") + (("decoder_hidden_size", "decoder_ffn_hidden_size")
                                                     if spec.has_reconstruction_decoder else ())
        widths = {f"model.{key}": model.resolved(key) for key in keys}
        rows = gemm_rows(self.data.seq_length, self.pipeline_shape(), spec.uses_views)
        problems = fp8_shape_problems(rows, widths, self.parallel.tensor_model_parallel_size)
        _require(not problems, f"{setting(self.training, 'precision')}: " + "; ".join(problems)
                 + " (change training.micro_batch_size, data.seq_length or masking.mask_ratio)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def value_at(self, key: str) -> Any:
        """The value of a dotted ``section.name`` key (``training.seed``): how checks that compare two
        configs field by field name what they compare."""
        section, _, name = key.partition(".")
        return getattr(getattr(self, section), name)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, saved: str | None = None) -> RunConfig:
        """Sections from a mapping, every value checked against its field's declared type
        (``checks.coerce``). ``saved``: the ``run_config.json`` it was read from, whose values an older
        version may have stored with a wrong type (``checks.coerce_saved``)."""
        _require(isinstance(raw, dict), f"{saved or 'the config'}: top level must be a mapping of sections, "
                                        f"got {describe(raw)}")
        unknown = set(raw) - {f.name for f in dataclasses.fields(cls)}
        _require(not unknown, f"unknown config sections: {sorted(map(str, unknown))}")
        parts = {}
        for f in dataclasses.fields(cls):
            section_cls = f.default_factory  # type: ignore[misc]
            parts[f.name] = _build_section(section_cls, raw.get(f.name), f.name, saved)
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
        try:
            raw = json.loads(Path(path).read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from None
        if isinstance(raw, dict) and isinstance(raw.get("data", {}), dict):
            raw.setdefault("data", {}).setdefault("document_mask", False)
        return cls.from_dict(raw, saved=str(path))


def _build_section(section_cls: type, values: Any, name: str, saved: str | None) -> Any:
    """One section; null means every default. Values are read through ``coerce`` (``coerce_saved``
    for a checkpoint's file)."""
    if values is None:
        values = {}
    _require(isinstance(values, dict), f"[{name}] must be a mapping of keys (e.g. '{name}: {{key: value}}'), "
                                       f"got {describe(values)}")
    hints = section_hints(section_cls)
    unknown = set(values) - set(hints)
    _require(not unknown, f"unknown keys in [{name}]: {sorted(map(str, unknown))}; valid keys: {sorted(hints)}")
    if saved:
        read = {key: coerce_saved(value, hints[key], f"{name}.{key}", saved) for key, value in values.items()}
    else:
        read = {key: coerce(value, hints[key], f"{name}.{key}") for key, value in values.items()}
    return section_cls(**read)


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last one silently)."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    first_line: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            seen = first_line.get(key)
        except TypeError:  # an unhashable key: construct_mapping says so with its position
            break
        if seen is not None:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r} (first at line {seen})",
                                                    key_node.start_mark)
        first_line[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def parse_yaml(text: str, where: str, *, one_line: bool = False) -> Any:
    """YAML text -> Python values; a syntax error or a duplicate key is one ``ValueError`` naming
    ``where`` (a file: ``FILE:LINE:COLUMN``; ``one_line``, a ``--set`` value: its column)."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        if mark is None:
            raise ValueError(f"{where}: not valid YAML: {problem}") from None
        if one_line:
            raise ValueError(f"{where}: the value is not valid YAML (column {mark.column + 1}): {problem}") from None
        raise ValueError(f"{where}:{mark.line + 1}:{mark.column + 1}: not valid YAML: {problem}") from None


def parse_override(text: str) -> tuple[str, str, Any]:
    """'training.lr=3e-4' -> ('training', 'lr', 0.0003). Values are parsed as YAML scalars/lists."""
    key, sep, value = text.partition("=")
    section, dot, name = key.strip().partition(".")
    _require(bool(sep and dot and section and name),
             f"override {text!r} must look like section.key=value (e.g. training.lr=3e-4)")
    return section, name, parse_yaml(value, f"--set {text!r}", one_line=True)


def load_run_config(path: str | Path | None = None, overrides: list[str] = ()) -> RunConfig:
    """YAML file (optional) plus 'section.key=value' overrides, validated as a whole."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as err:
            raise ValueError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
        loaded = parse_yaml(text, str(path))
        _require(loaded is None or isinstance(loaded, dict),
                 f"{path}: top level must be a mapping of sections, got {describe(loaded)}")
        raw = loaded or {}
    for text in overrides:
        section, name, value = parse_override(text)
        if not isinstance(raw.get(section), dict):
            raw[section] = {} if raw.get(section) is None else raw[section]
        _require(isinstance(raw[section], dict), f"{path}: [{section}] must be a mapping of keys, got "
                                                 f"{describe(raw[section])}")
        raw[section][name] = value
    return RunConfig.from_dict(raw)


def replace_sections(holder: Any, values: dict[str, Any]) -> Any:
    """``holder`` (a dataclass with RunConfig section attributes) with ``values`` applied, one
    ``dataclasses.replace`` per section, so each section validates its new fields together."""
    by_section: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        section, _, name = key.partition(".")
        by_section.setdefault(section, {})[name] = value
    return dataclasses.replace(holder, **{section: dataclasses.replace(getattr(holder, section), **fields)
                                          for section, fields in by_section.items()})
