"""The builders table (``arch.REGISTRY``'s names to their parts): one ``TrainSpec`` per architecture, one import per architecture.

Each module here is a ``TrainSpec`` subclass whose methods call its parts (model builder, forward step), so a reader follows a run
from ``get_train_spec(run_cfg.model.arch)`` to its model. The names and cheap facts are ``arch.REGISTRY``'s;
this table imports torch, so configs validate without it.
"""

from __future__ import annotations

from megatron_crossbert.architectures import bert, crossbert, mlm
from megatron_crossbert.architectures.spec import TrainSpec

TRAIN_SPECS: dict[str, TrainSpec] = {module.TRAIN_SPEC.arch.name: module.TRAIN_SPEC for module in (crossbert, bert, mlm)}
"""Keyed like ``arch.REGISTRY`` (``tests/test_arch.py`` holds them equal)."""


def get_train_spec(name: str) -> TrainSpec:
    """The builders of architecture ``name``; ValueError listing the registered names otherwise."""
    try:
        return TRAIN_SPECS[name]
    except KeyError:
        raise ValueError(f"unknown architecture {name!r}; registered: {sorted(TRAIN_SPECS)}") from None
