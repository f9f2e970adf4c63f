"""The checkpoint errors, at the bottom of the package so every module (safe reads included) can raise them."""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete or incompatible; the message says which and where."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint file references code outside the allowlist; it was not run."""
