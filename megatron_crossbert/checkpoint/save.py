"""Save checkpoints: the full training state (``save_checkpoint``) and model-only (``save_model_only``).

A save is complete only once every rank has written its shards AND rank 0 has written the records
(tokenizer, data), ``checksums.json`` and then ``run_config.json``; 'latest' is replaced atomically
after that, under the commit journal ``latest.pending`` (``directories``: a kill between the two is
finished by the next start instead of blocking it). A crash (or SIGKILL) mid-save therefore leaves
the previous checkpoint as the one readers resolve. The partial directory is removed by the next save of the same iteration or pruned
later. A save that fails (a full disk above all) raises one line on every rank (``save_errors``);
its helper processes die with the trainer (``processes``).

With ``checkpoint.async_save`` (:class:`AsyncSaves`, megatron-core's ``mcore`` async strategy) the
save is planned collectively as a synchronous one is, then one forked writer process per rank
writes that rank's shards while training continues. A forked child sees the parameters and
optimizer state as they were at the fork (copy-on-write), so later optimizer steps cannot leak into
the checkpoint; on a GPU megatron copies the tensors to host memory first. The same commit
(``metadata.json``, then the records, ``run_config.json`` and ``latest``) runs in ``finalize``, which every rank
calls at each step boundary: megatron-core runs it only once the writers of *all* ranks have
finished, so a crash before it leaves the previous checkpoint as the one readers resolve, and a save
still pending when training raises is never committed. NVIDIA Resiliency Extension's writer (``nvrx``)
runs only where ``checkpoint.async_writer`` asks for it (``async_strategy``).

What one run remembers between saves lives on its :class:`RunSaves` (held by the training
session), never in module state: the directories it completed, the only complete ones a save may
replace, and its saves still in flight, so a second run in the same process never commits, or
waits on, the first one's.
"""

from __future__ import annotations

import functools
import logging
import shutil
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch.distributed as dist
from megatron.core import dist_checkpointing
from torch.distributed.checkpoint.api import CheckpointException as TorchCheckpointException

from megatron_crossbert.checkpoint import fault_points
from megatron_crossbert.checkpoint.async_strategy import (calls_queue_class, drop_mcore_deprecation,
                                                          run_async_strategy)
from megatron_crossbert.checkpoint.checksums import own_shards
from megatron_crossbert.checkpoint.checksums import write_record as write_checksums
from megatron_crossbert.checkpoint.data_record import write_data_record
from megatron_crossbert.checkpoint.errors import CheckpointError, CheckpointSaveError, DiskFullError
from megatron_crossbert.checkpoint.directories import (
    ITER_PREFIX,
    RUN_CONFIG_FILE,
    begin_commit,
    complete_checkpoints,
    end_commit,
    is_complete,
    iteration_dir_name,
    iteration_of,
    latest_iteration,
    point_latest,
)
from megatron_crossbert.checkpoint.optimizer_format import (
    LEGACY_DP_RESHARDABLE,
    SAVE_SHARDING_TYPE,
    save_content_metadata,
)
from megatron_crossbert.checkpoint.pins import create_pin_file, remove_unless_read
from megatron_crossbert.checkpoint.processes import install_results_queue, schedule_guarded
from megatron_crossbert.checkpoint.save_errors import SaveTarget, checkpoint_bytes, room_problem, save_failure
from megatron_crossbert.checkpoint.state import Progress, training_state_dict
from megatron_crossbert.checkpoint.tokenizer_record import write_checkpoint_record
from megatron_crossbert.config import RunConfig
from megatron_crossbert.fsutil import atomic_write_text
from megatron_crossbert.platform.distributed import is_rank_zero

logger = logging.getLogger(__name__)


class AsyncSaves:
    """One run's background saves: started by :meth:`start`, committed in order by :meth:`finalize`."""

    def __init__(self) -> None:
        self._queue = None  # an AsyncCallsQueue of the run's strategy, created by the first async save
        self._targets: deque[SaveTarget] = deque()  # what each pending save's failure names, in order

    def start(self, state: dict, ckpt_dir: Path, content_metadata: dict | None,
              commit: Callable[[], None], target: SaveTarget | None = None, writer: str = "mcore") -> None:
        """Collective: plan the save of ``state`` into ``ckpt_dir``, fork the writers (``writer``: the run's
        ``checkpoint.async_writer``), queue ``commit``.

        The writers and the results server die with the trainer (``processes``)."""
        target = target or SaveTarget.of(ckpt_dir.parent, iteration_of(ckpt_dir) or 0)
        strategy = run_async_strategy(writer)  # the configured writer, logged once
        install_results_queue(asynchronous=True)
        request = _failing_as(target, dist_checkpointing.save, state, str(ckpt_dir), async_sharded_save=True,
                              async_strategy=strategy.name, content_metadata=content_metadata)
        request.add_finalize_fn(commit)  # after megatron's own finalizers (metadata.json)
        if self._queue is None:
            self._queue = calls_queue_class(strategy)(persistent=False)
        schedule_guarded(self._queue, request)
        self._targets.append(target)

    def pending(self) -> int:
        """Saves started but not yet committed on this rank."""
        return 0 if self._queue is None else self._queue.get_num_unfinalized_calls()

    def finalize(self, blocking: bool) -> list[int]:
        """Collective: commit every save whose writers finished on all ranks (all of them if ``blocking``).

        Returns the indices of the committed saves. A write error on any rank is raised on every rank
        as one line naming the failed save (``save_errors``) and nothing is committed. A no-op when no
        save was started.
        """
        if not self.pending():
            return []
        try:
            done = self._queue.maybe_finalize_async_calls(blocking=blocking)
        except CheckpointError:  # our commit failed: already one line
            self._targets.popleft()
            raise
        except (Exception, TorchCheckpointException) as err:  # DCP's exception is a BaseException
            raise save_failure(err, self._targets.popleft()) from err
        for _ in done:
            self._targets.popleft()
        return done


@dataclass
class RunSaves:
    """One run's saves: the ones it completed and the ones still being written in the background."""

    written: set[Path] = field(default_factory=set)
    """Checkpoint directories this run completed; the only complete ones a save may replace."""
    in_flight: AsyncSaves = field(default_factory=AsyncSaves)
    """Background saves not yet committed (``checkpoint.async_save``)."""

    def finalize(self, blocking: bool) -> list[int]:
        """Collective: commit the background saves that finished on every rank (all if ``blocking``)."""
        return self.in_flight.finalize(blocking)


def _failing_as(target: SaveTarget, fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)``; any failure becomes the one-line error of a failed save (``save_errors``)."""
    try:
        return fn(*args, **kwargs)
    except CheckpointError:
        raise
    except (Exception, TorchCheckpointException) as err:  # DCP's CheckpointException is a BaseException
        raise save_failure(err, target) from err


def _from_rank_zero(value):
    """Rank 0's ``value`` on every rank (a synchronization point, like the barrier it replaces)."""
    if not dist.is_initialized():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _on_rank_zero(work: Callable[[], None], target: SaveTarget) -> None:
    """Collective: run ``work`` on rank 0 only; if it failed, every rank raises the same one-line error.

    A bare barrier after rank 0's writes would leave the other ranks waiting for a rank 0 that has
    already raised (a full disk while writing ``run_config.json``, say) until the process-group timeout.
    """
    failure: CheckpointSaveError | None = None
    if is_rank_zero():
        try:
            _failing_as(target, work)
        except CheckpointSaveError as err:
            failure = err
    verdict = _from_rank_zero(None if failure is None else (isinstance(failure, DiskFullError), str(failure)))
    if failure is not None:
        raise failure
    if verdict is not None:
        raise (DiskFullError if verdict[0] else CheckpointSaveError)(verdict[1])


def _prepare_dir(ckpt_dir: Path, written: set[Path], target: SaveTarget) -> None:
    """Check that the save fits (counting what the stale directory of the same iteration frees), remove
    that directory (its shards would clash), then create it: a save that cannot fit is refused before
    it writes or removes a byte.

    A complete checkpoint that this run did not write (not in ``written``) is never removed
    (start_guard refuses such runs up front; this is the last line of defence).
    """
    if is_complete(ckpt_dir) and ckpt_dir.resolve() not in written:
        raise CheckpointError(f"{ckpt_dir}: a complete checkpoint from an earlier run is in the way; "
                              f"refusing to overwrite it (move it away or use another --save)")

    def work() -> None:
        problem = room_problem(target, f"saving {target.name}", checkpoint_bytes(ckpt_dir) if ckpt_dir.exists() else 0)
        if problem:
            raise DiskFullError(problem)
        if ckpt_dir.exists():
            shutil.rmtree(ckpt_dir)
        ckpt_dir.mkdir(parents=True)

    _on_rank_zero(work, target)


def prune_checkpoints(root: Path, keep_last: int) -> list[Path]:
    """Delete complete checkpoints older than the newest ``keep_last`` and stale partial ones (rank 0);
    returns what was deleted.

    Only ``iter_<digits>`` directories are considered, ordered by iteration; the one 'latest' names
    and anything newer than it are never touched. One a reader is reading (``pins``) is kept, and
    pruned by a later save.
    """
    current = latest_iteration(root)
    if keep_last <= 0 or current is None:
        return []
    complete = complete_checkpoints(root)
    partial = [p for p in root.glob(f"{ITER_PREFIX}*") if p.is_dir() and iteration_of(p) is not None
               and not is_complete(p)]
    removed = []
    for path in (p for p in complete[:-keep_last] + partial if iteration_of(p) < current):
        if remove_unless_read(path):
            removed.append(path)
        else:
            logger.warning("keeping %s past checkpoint.keep_last=%d: a reader (an export, an evaluation, another "
                           "run's start) is reading it; a later save prunes it", path, keep_last)
    return removed


def _hashed_shards(ckpt_dir: Path) -> dict[str, dict]:
    """Collective: every rank hashes the shards it wrote; every rank gets them all (``checksums``)."""
    if not dist.is_initialized():
        return own_shards(ckpt_dir, 0)
    shares: list = [None] * dist.get_world_size()
    dist.all_gather_object(shares, own_shards(ckpt_dir, dist.get_rank()))
    return {name: entry for share in shares for name, entry in share.items()}


def _seal(ckpt_dir: Path, run_cfg: RunConfig, hashed: dict[str, dict], consumed_samples: int | None) -> None:
    """Rank 0: the tokenizer and data records (the latter for full checkpoints, ``consumed_samples``
    given), ``checksums.json`` (covering the run_config.json about to be written), the commit journal,
    then ``run_config.json``, which marks the save complete, then 'latest', then the journal is done. The
    readers' pin file is made here, after the shards: an empty directory is what megatron's save expects
    (anything in it makes megatron warn of an "old incomplete / corrupted checkpoint")."""
    create_pin_file(ckpt_dir)
    write_checkpoint_record(ckpt_dir, run_cfg)
    if consumed_samples is not None:
        write_data_record(ckpt_dir, run_cfg, consumed_samples)
    text = run_cfg.to_json()
    write_checksums(ckpt_dir, hashed, {RUN_CONFIG_FILE: text.encode()})
    begin_commit(ckpt_dir, text)
    atomic_write_text(ckpt_dir / RUN_CONFIG_FILE, text)
    fault_points.kill_before_latest(iteration_of(ckpt_dir))
    point_latest(ckpt_dir)
    end_commit(ckpt_dir.parent)


def _commit(saves: RunSaves, ckpt_dir: Path, run_cfg: RunConfig, progress: Progress, target: SaveTarget) -> None:
    """Collective, once every rank's shards are on disk: records, checksums and run_config.json, then
    'latest', then prune."""
    fault_points.pause_before_commit(progress.iteration)
    hashed = _hashed_shards(ckpt_dir)  # an all-gather: every rank's shards are on disk past it

    def work() -> None:
        _seal(ckpt_dir, run_cfg, hashed, progress.consumed_samples)
        prune_checkpoints(ckpt_dir.parent, run_cfg.checkpoint.keep_last)

    _on_rank_zero(work, target)
    saves.written.add(ckpt_dir.resolve())


def save_checkpoint(saves: RunSaves, root: str | Path, model, optimizer, scheduler, progress: Progress,
                    run_cfg: RunConfig, *, sharding_type: str = SAVE_SHARDING_TYPE,
                    asynchronous: bool | None = None) -> Path:
    """Collective: write ``root/iter_XXXXXXX`` on all ranks, then commit it (run_config, 'latest').

    Asynchronous (``asynchronous``, by default ``checkpoint.async_save``): this returns once the shards
    are handed to background writers; the commit happens in ``saves.finalize``. ``sharding_type``
    exists so tests can still write
    the older ``dp_reshardable`` layout (without the content metadata, as it was written). A save
    that fails (a full disk above all) raises one line naming it and the last complete checkpoint,
    on every rank; nothing complete is touched and the partial directory stays ignored.
    """
    root = Path(root)
    saves.finalize(blocking=True)  # one save in flight at a time, committed in order
    ckpt_dir = root / iteration_dir_name(progress.iteration)
    target = SaveTarget.of(root, progress.iteration)
    _prepare_dir(ckpt_dir, saves.written, target)
    dist_sharding = sharding_type if run_cfg.parallel.use_distributed_optimizer else None
    state = training_state_dict(model, optimizer, scheduler, progress, dist_sharding, is_loading=False)
    content = None if sharding_type == LEGACY_DP_RESHARDABLE else save_content_metadata(run_cfg)
    at_save = Progress(progress.iteration, progress.consumed_samples)  # an async commit runs steps later
    commit = functools.partial(_commit, saves, ckpt_dir, run_cfg, at_save, target)
    if run_cfg.checkpoint.async_save if asynchronous is None else asynchronous:
        saves.in_flight.start(state, ckpt_dir, content, commit, target, run_cfg.checkpoint.async_writer)
    else:
        install_results_queue(asynchronous=False)  # the writer runs here: no server process
        drop_mcore_deprecation()  # megatron's synchronous save warns of its async writer's deprecation
        _failing_as(target, dist_checkpointing.save, state, str(ckpt_dir), content_metadata=content)
        commit()
    return ckpt_dir


def save_model_only(model, run_config: RunConfig, root: str | Path, iteration: int = 0) -> Path:
    """Write a model-only checkpoint (no optimizer) under ``root`` and point 'latest' at it."""
    ckpt_dir = Path(root) / iteration_dir_name(iteration)
    target = SaveTarget.of(root, iteration)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    install_results_queue(asynchronous=False)
    drop_mcore_deprecation()
    _failing_as(target, dist_checkpointing.save, {"model": model.sharded_state_dict()}, str(ckpt_dir))
    seal_model_only(ckpt_dir, run_config, target)
    return ckpt_dir


def seal_model_only(ckpt_dir: Path, run_config: RunConfig, target: SaveTarget | None = None) -> None:
    """Collective, once a model-only checkpoint's shards are on disk: its records, checksums and
    run_config.json, then 'latest' (the commit of ``save_model_only``, or of an async model save)."""
    target = target or SaveTarget.of(ckpt_dir.parent, iteration_of(ckpt_dir) or 0)
    hashed = _hashed_shards(ckpt_dir)
    _on_rank_zero(functools.partial(_seal, ckpt_dir, run_config, hashed, None), target)
