"""The checks every config section shares: declared types (``coerce``), ranges, and ``Literal`` choices.

``coerce`` is the one owner of "a value has its field's declared type": ``config/run.py`` calls it for
every value of every section read from YAML, ``--set`` or a checkpoint's ``run_config.json`` (there through
``coerce_saved``, which reads what older versions let through). ``field_choices`` is where a CLI reads a
field's ``choices``, so no flag retypes what a section declares.

Every rule's message names what it was given and its bound the same way, ``section.key=value``
(``setting``): ``training.lr_warmup_iters=10000 must be <= training.train_iters=6``. A rule another module
owns (``schedules``, ``masking``) runs through ``named_rule``, which puts the fields it read in front.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import types
import typing
from typing import Any, Callable, Literal

logger = logging.getLogger(__name__)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def show(value: Any) -> str:
    """A value as a YAML user writes it: null, true/false, numbers as given, strings quoted."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value)


def setting(obj: Any, name: str) -> str:
    """``section.name=value`` of a section's field: how every rule names what it was given and its bounds."""
    return f"{obj.SECTION}.{name}={show(getattr(obj, name))}"


def named_rule(settings: str, check: Callable[[], Any]) -> Any:
    """Run a rule another module owns (``schedules``, ``masking``) on config fields; its one-line ValueError
    is prefixed with the ``settings`` it read (``setting``'s ``section.key=value``, comma-joined)."""
    try:
        return check()
    except ValueError as err:
        raise ValueError(f"{settings}: {err}") from None


@functools.cache
def _literal_fields(section_cls: type) -> dict[str, tuple]:
    """{field name: allowed values} of every ``Literal``-typed field of a config dataclass."""
    return {name: typing.get_args(hint) for name, hint in section_hints(section_cls).items()
            if typing.get_origin(hint) is Literal}


def field_choices(section_cls: type, name: str) -> tuple:
    """The values a ``Literal`` field accepts (CLI ``choices`` come from here, never retyped)."""
    return _literal_fields(section_cls)[name]


def _check_choices(obj: Any) -> None:
    """Every ``Literal`` field of ``obj`` holds one of its values; one line naming the field otherwise."""
    for name, choices in _literal_fields(type(obj)).items():
        _require(getattr(obj, name) in choices,
                 f"{setting(obj, name)} must be one of {', '.join(map(str, choices))}")


def _seed(obj: Any, name: str) -> None:
    """Seeds go to numpy and torch, which take [0, 2**32)."""
    _require(0 <= getattr(obj, name) < 2**32, f"{setting(obj, name)} must be in [0, 2**32)")


def _optional_positive(obj: Any, *names: str) -> None:
    """``None`` (the documented default) or > 0: a 0 would silently fall back to the default (``x or ...``)."""
    for name in names:
        value = getattr(obj, name)
        _require(value is None or value > 0, f"{setting(obj, name)} must be > 0 or null (the default)")


def _positive(obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        _require(value is not None and value > 0, f"{setting(obj, name)} must be > 0")


def _at_least(obj: Any, name: str, low: float, why: str = "") -> None:
    """``name >= low`` (``why``: what the bound means, e.g. "0 turns it off")."""
    _require(getattr(obj, name) >= low, f"{setting(obj, name)} must be >= {low}" + (f" ({why})" if why else ""))


def _fraction(obj: Any, name: str) -> None:
    """A probability that may be 0 but never 1: [0, 1)."""
    _require(0 <= getattr(obj, name) < 1, f"{setting(obj, name)} must be in [0, 1)")


# ---- declared types: every value read from YAML, --set or run_config.json passes through coerce() ----

class WrongType(ValueError):
    """A config value whose type is not its field's declared one (``section.key must be ..., got ...``)."""


def describe(value: Any) -> str:
    """A value as a YAML user reads it, with its kind: ``true (a boolean)``, ``'2' (a string)``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    kinds = ((int, "an integer"), (float, "a float"), (str, "a string"), (list, "a list"), (dict, "a mapping"))
    kind = next((text for cls, text in kinds if isinstance(value, cls)), type(value).__name__)
    return f"{value!r} ({kind})"


def _expected(hint: Any) -> str:
    """What a field of type ``hint`` holds, in words."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is type(None):
        return "null"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_expected(arg) for arg in args)
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    if origin is list:
        items = typing.get_args(args[0]) or args
        return "a list of " + " or ".join(_PLURALS.get(item, str(item)) for item in items)
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(hint, str(hint))


_PLURALS = {bool: "booleans", int: "integers", float: "numbers", str: "strings"}


def _number(value: Any) -> float | None:
    """``value`` as a finite float when it is a real number or a numeric string (YAML 1.1 reads ``3e-4``
    as a string); None otherwise. Booleans are not numbers here."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _scalar(value: Any, hint: type) -> tuple[bool, Any]:
    """(fits, converted) for a plain ``bool``/``int``/``float``/``str`` field."""
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if hint is float:
        number = _number(value)
        return number is not None, number
    if hint is str:
        return isinstance(value, str), value
    raise TypeError(f"config fields of type {hint!r} are not supported by coerce()")


def coerce(value: Any, hint: Any, key: str) -> Any:
    """``value`` as the declared type ``hint`` of field ``key`` (``section.name``), or ``WrongType``.

    The rules (docs/training.md, Configuration): a boolean is only true/false (not 0, 1 or the string 'false'); an
    integer is an integer (not 2.0, not true: the flags' argparse types refuse those too); a number is an
    integer or a float, finite, or a numeric string (YAML 1.1 reads 3e-4 as one); a string is a string; a list
    is a list (a bare string is refused, never split into characters) whose items have the item type; null
    only where the field is optional. ``Literal`` fields need a string here; which strings is the section's
    own ``_check_choices`` (it knows accepted spellings such as 'wsd')."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return coerce(value, arg, key)
            except WrongType:
                continue
    elif origin is Literal:
        if isinstance(value, str) and all(isinstance(choice, str) for choice in args):
            return value
    elif origin is list:
        if isinstance(value, list):
            return [coerce(item, args[0], f"{key}[{i}]") for i, item in enumerate(value)]
        if isinstance(value, str):
            raise WrongType(f"{key} must be {_expected(hint)}, got the string {value!r}; write [{value}]")
    else:
        fits, converted = _scalar(value, hint)
        if fits:
            return converted
    raise WrongType(f"{key} must be {_expected(hint)}, got {describe(value)}")


def coerce_saved(value: Any, hint: Any, key: str, source: str) -> Any:
    """A value read back from a checkpoint's ``run_config.json``: the strict rule, except what an older
    version let through and has one meaning (the run used it so): a boolean in a number field is 0 or 1, an
    integral float in an integer field is that integer, anything in a boolean field is its truth value. Each
    is logged naming the file and key; anything else is refused naming them (a checkpoint never resumes with
    a guessed value)."""
    try:
        return coerce(value, hint, key)
    except WrongType as err:
        plain = next((a for a in typing.get_args(hint) if a is not type(None)), hint)
        if plain is bool:
            converted = bool(value)  # the run tested the value's truth
        elif plain in (int, float) and (isinstance(value, bool) or (isinstance(value, float) and value.is_integer())):
            converted = plain(value)
        else:
            raise WrongType(f"{source}: {err}") from None
        logger.warning("%s: %s is %s (saved by an older version, which did not check types); read as %r, "
                       "the value that run used", source, key, describe(value), converted)
        return converted


@functools.cache
def section_hints(section_cls: type) -> dict[str, Any]:
    """{field name: declared type} of a config dataclass (``typing.get_type_hints``, cached)."""
    hints = typing.get_type_hints(section_cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(section_cls)}
