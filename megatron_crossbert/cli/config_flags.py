"""Shorthand flags for ``RunConfig`` fields, typed by the config itself.

A CLI lists its shorthands as ``ConfigFlag(flag, keys, help)``; the argument's type, ``choices``
(the field's ``Literal`` values, or a registry's names through it) and ``nargs`` come from the
dataclass field the first key names, so no CLI retypes what ``config`` declares. A flag may set
several keys at once (``--seed`` sets ``training.seed`` and ``masking.seed``). The values a user
gave come back either as ``section.key=value`` overrides (``crossbert-pretrain``) or applied to an
object holding the config sections (``crossbert-demo``'s options).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from megatron_crossbert.config import RunConfig

SECTIONS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(RunConfig)}  # type: ignore[misc]
"""RunConfig's section name -> its dataclass."""


@dataclass(frozen=True)
class ConfigFlag:
    """One shorthand flag and the config key(s) it sets."""

    flag: str
    """The option string, e.g. ``--train-iters``."""
    keys: tuple[str, ...]
    """``section.field`` keys it sets; the first decides the type and choices."""
    help: str = ""
    """What it means to a user (the keys and, where known, the default are appended)."""
    metavar: str | None = None
    """How ``--help`` names the value (default: argparse's, the flag in capitals)."""

    def __post_init__(self) -> None:
        for key in self.keys:
            section, _, name = key.partition(".")
            if section not in SECTIONS or name not in {f.name for f in dataclasses.fields(SECTIONS[section])}:
                raise ValueError(f"ConfigFlag {self.flag}: {key!r} is not a RunConfig field")

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


def _field_type(key: str) -> Any:
    section, _, name = key.partition(".")
    return typing.get_type_hints(SECTIONS[section])[name]


def _argparse_kwargs(hint: Any) -> dict[str, Any]:
    """type / choices / nargs / action for a field annotation (``X | None`` as ``X``)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if typing.get_origin(hint) is Literal:
        return {"choices": typing.get_args(hint)}
    if typing.get_origin(hint) is list:
        item = typing.get_args(hint)[0]
        return {"nargs": "+", "type": item if isinstance(item, type) else str}  # list[str | float]: the text
    if hint is bool:
        return {"action": "store_true"}
    return {"type": hint}


def _current(holder: Any, key: str) -> Any:
    section, _, name = key.partition(".")
    return getattr(getattr(holder, section), name)


def add_config_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, flags: tuple[ConfigFlag, ...],
                     defaults: Any = None) -> None:
    """Add every flag; ``defaults`` (an object with section attributes) supplies shown defaults, else
    an absent flag parses as None and changes nothing."""
    for flag in flags:
        default = None if defaults is None else _current(defaults, flag.keys[0])
        shown = "" if defaults is None else ", default: %(default)s"
        help_text = f"{flag.help} ({', '.join(flag.keys)}{shown})".lstrip()
        kwargs = _argparse_kwargs(_field_type(flag.keys[0]))
        if flag.metavar and "action" not in kwargs:
            kwargs["metavar"] = flag.metavar
        parser.add_argument(flag.flag, dest=flag.dest, default=default, help=help_text, **kwargs)


def flag_values(args: argparse.Namespace, flags: tuple[ConfigFlag, ...]) -> dict[str, Any]:
    """``{section.field: value}`` of every flag that has a value."""
    values = {}
    for flag in flags:
        value = getattr(args, flag.dest)
        if value is not None:
            values.update({key: value for key in flag.keys})
    return values


def as_overrides(values: dict[str, Any]) -> list[str]:
    """``section.field=value`` strings for ``config.load_run_config`` (values JSON-encoded, YAML-parsed)."""
    return [f"{key}={json.dumps(value)}" for key, value in values.items()]
