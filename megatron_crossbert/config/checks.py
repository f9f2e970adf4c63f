"""The checks every config section's ``__post_init__`` shares, and the ``Literal`` fields' values.

``field_choices`` is where a CLI reads a field's ``choices``, so no flag retypes what a section declares.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any, Literal


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


@functools.cache
def _literal_fields(section_cls: type) -> dict[str, tuple]:
    """{field name: allowed values} of every ``Literal``-typed field of a config dataclass."""
    hints = typing.get_type_hints(section_cls)
    return {f.name: typing.get_args(hints[f.name]) for f in dataclasses.fields(section_cls)
            if typing.get_origin(hints[f.name]) is Literal}


def field_choices(section_cls: type, name: str) -> tuple:
    """The values a ``Literal`` field accepts (CLI ``choices`` come from here, never retyped)."""
    return _literal_fields(section_cls)[name]


def _check_choices(obj: Any) -> None:
    """Every ``Literal`` field of ``obj`` holds one of its values; one line naming the field otherwise."""
    for name, choices in _literal_fields(type(obj)).items():
        value = getattr(obj, name)
        _require(value in choices, f"{type(obj).__name__}.{name} must be one of {', '.join(map(str, choices))}, "
                                   f"got {value!r}")


def _positive(obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        _require(value is not None and value > 0, f"{type(obj).__name__}.{name} must be > 0, got {value!r}")
