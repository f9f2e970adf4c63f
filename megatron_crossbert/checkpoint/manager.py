"""The checkpoint package's front door for training: a run starts, saves and finishes through one object.

Training knows one name, :class:`CheckpointManager` (as torchtitan's trainer knows its ``CheckpointManager``);
the guards stay in their own modules, and this file only puts them in order:

- **start** (:meth:`CheckpointManager.start`, every rank, before anything is built or written), each guard
  entered once, in this order: the save directory's run lock (``run_lock``, rank 0), where the run starts,
  verified once (``start_guard``, ``verify``), the data records (``data_record``), the resume-schedule
  policy (``resume_schedule``), which fixes the run config the run trains with
  (:attr:`CheckpointManager.run_cfg`), room for the next checkpoint (``save_errors``), and the tokenizer
  records of the checkpoint and the datasets (``tokenizer_record``);
- once the process group and the model exist, :meth:`~CheckpointManager.restore`: rank 0 finishes a killed
  commit and clears what ``--overwrite`` moves, then the source's hashes are checked (each rank its share)
  and its state (a resume) or its weights (``init_from``) loaded;
- :meth:`~CheckpointManager.save` at the step boundaries, :meth:`~CheckpointManager.commit_finished` for the
  background saves whose writers are done, and :meth:`~CheckpointManager.finish` before the process exits.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import torch

from megatron_crossbert.checkpoint.data_record import check_dataset_contents, check_resume_data
from megatron_crossbert.checkpoint.load import load_checkpoint, read_model_weights
from megatron_crossbert.checkpoint.resume_schedule import schedule_on_resume
from megatron_crossbert.checkpoint.run_lock import run_lock_for
from megatron_crossbert.checkpoint.save import RunSaves, save_checkpoint
from megatron_crossbert.checkpoint.save_errors import check_room_to_start
from megatron_crossbert.checkpoint.start_guard import StartChoice, apply_start, choose_start
from megatron_crossbert.checkpoint.state import Progress
from megatron_crossbert.checkpoint.tokenizer_record import check_tokenizers
from megatron_crossbert.checkpoint.verify import verify_contents
from megatron_crossbert.config import RunConfig
from megatron_crossbert.platform.distributed import is_rank_zero

__all__ = ["CheckpointManager", "Progress"]


@dataclass
class CheckpointManager:
    """One training run's checkpoints: where it started, what it saved, what is still being written."""

    run_cfg: RunConfig
    """The config the run trains with: the given one, or, when a resume keeps the checkpoint's schedules
    (``checkpoint.lr_schedule_on_resume=checkpoint``), the given one with the saved data schedules."""
    choice: StartChoice
    """Where the run starts (the verified source, if any) and what ``--overwrite`` moves aside."""
    saves: RunSaves = field(default_factory=RunSaves)
    """This run's saves: the ones it completed and the background ones in flight."""
    resumed_from: Path | None = None
    """The checkpoint whose full state :meth:`restore` loaded (None: a fresh start or ``init_from``)."""
    latest: Path | None = None
    """The newest checkpoint of this run in save_dir: its last save, or the one it resumed there."""
    latest_iteration: int | None = None
    """The step ``latest`` holds: a second save of that step is skipped (never rewrite a checkpoint)."""

    @classmethod
    def check(cls, run_cfg: RunConfig) -> CheckpointManager:
        """Read-only, before anything is built or written, each guard once, in this order: where the run
        starts, verified (``start_guard``, ``verify``); the data (a full resume continues on the checkpoint's,
        every dataset holds what preprocessing wrote: ``data_record``); the schedule policy; room for the next
        checkpoint (before TensorBoard writes its first event); the tokenizers of the checkpoint and of every
        dataset (``tokenizer_record``, the one check that loads the run's tokenizer). Raises the first
        refusal in one line."""
        choice = choose_start(run_cfg)
        source = choice.source
        try:
            if source is not None and not source.weights_only:
                check_resume_data(source.directory, source.saved, run_cfg)
            check_dataset_contents(run_cfg)
            effective = schedule_on_resume(run_cfg, source)
            check_room_to_start(run_cfg.checkpoint.save_dir)
            check_tokenizers(run_cfg, None if source is None else source.directory)
        except BaseException:
            if source is not None:
                source.release()
            raise
        return cls(effective, choice)

    @classmethod
    @contextmanager
    def start(cls, run_cfg: RunConfig) -> Iterator[CheckpointManager]:
        """The checked manager, under the save directory's run lock for the run's life (rank 0). A start
        refused here leaves no trace in a save directory it created (``run_lock.run_lock_for``)."""
        with run_lock_for(run_cfg):
            yield cls.check(run_cfg)

    def _prepare_save_dir(self) -> None:
        """Collective (every rank has checked: initialising the process group was a rendezvous): rank 0
        finishes a killed commit, removes stale temporaries and moves aside what ``--overwrite`` moves
        (``start_guard.apply_start``) while the others wait."""
        save_dir = self.run_cfg.checkpoint.save_dir
        if not save_dir:
            return
        if is_rank_zero():
            apply_start(self.choice, save_dir)
        torch.distributed.barrier()

    def restore(self, model, optimizer, scheduler) -> Progress:
        """Collective, once the process group and the model exist: the save directory made ready for this
        run's saves, then the source's files checked against their hashes (each rank hashes its share) and
        its full state (a resume) or its weights alone (``init_from``) loaded; the progress to continue from.
        Releases the source's pin once read, so a run writing into its directory may prune it again."""
        self._prepare_save_dir()
        source = self.choice.source
        if source is None:
            return Progress()
        source = verify_contents(source, self.run_cfg.checkpoint.verify, collective=True)
        try:
            if source.weights_only:
                read_model_weights(model, source)
                reload = getattr(optimizer, "reload_model_params", None)  # bf16: fp32 main params live there
                if reload is not None:
                    reload()
                return Progress()
            progress = load_checkpoint(source, model, optimizer, scheduler, self.run_cfg)
        finally:
            source.release()
        self._resumed(source.directory, progress.iteration)
        return progress

    def _resumed(self, directory: Path, iteration: int) -> None:
        """Record the resume; a checkpoint of save_dir is this run's latest, never saved over."""
        self.resumed_from = directory
        save_dir = self.run_cfg.checkpoint.save_dir
        if save_dir and directory.resolve().parent == Path(save_dir).resolve():
            self.latest, self.latest_iteration = directory, iteration

    def save(self, model, optimizer, scheduler, progress: Progress, *, asynchronous: bool | None = None) -> None:
        """Collective: this step's checkpoint in save_dir (``save.save_checkpoint``; in the background under
        ``checkpoint.async_save`` unless ``asynchronous`` says otherwise). Nothing without a save_dir, or
        when ``latest`` already holds this step."""
        root = self.run_cfg.checkpoint.save_dir
        if not root or self.latest_iteration == progress.iteration:
            return
        self.latest = save_checkpoint(self.saves, root, model, optimizer, scheduler, progress, self.run_cfg,
                                      asynchronous=asynchronous)
        self.latest_iteration = progress.iteration

    def commit_finished(self) -> None:
        """Collective, at a step boundary: commit the background saves that finished on every rank."""
        self.saves.finalize(blocking=False)

    def finish(self) -> None:
        """Collective, before the process exits: wait for every background save and commit it."""
        self.saves.finalize(blocking=True)
