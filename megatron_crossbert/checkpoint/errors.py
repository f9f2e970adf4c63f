"""The checkpoint errors, at the bottom of the package so every module (safe reads included) can raise them.

All are defined under ``megatron_crossbert.``, so every CLI prints them as one ``error:`` line and exits 2.
"""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete or incompatible; the message says which and where."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint file references code outside the allowlist; it was not run."""


class CheckpointSaveError(CheckpointError):
    """A save failed; nothing complete was touched. The message names the save and the last complete one."""


class DiskFullError(CheckpointSaveError):
    """A save (or the start of a run) needs space or quota its filesystem does not have."""


class RunLockedError(CheckpointError):
    """Another live training run holds the save directory (``run.lock``)."""


class ChecksumMismatchError(CheckpointError):
    """A checkpoint file's content differs from the hash recorded when it was saved."""


class DataChangedError(CheckpointError):
    """A resume would continue on other data than the checkpoint was trained on."""
