"""Build everything a training run needs, in megatron's order, from one RunConfig.

Order matters: the platform (process groups, CPU patches, RNG seeding) first, then the model chunk
of this pipeline stage, DDP, optimizer and scheduler, then the checkpoint (which restores RNG and
the data position), and only then the data loaders, whose samplers start at the restored
consumed-sample count.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from megatron.core import parallel_state

from megatron_crossbert.platform import distributed as platform
from megatron_crossbert.architectures.build import build_model
from megatron_crossbert.checkpoint.async_strategy import check_async_writer
from megatron_crossbert.checkpoint.manager import CheckpointManager, Progress
from megatron_crossbert.config import RunConfig
from megatron_crossbert.data.datasets.build import build_datasets
from megatron_crossbert.models.attention_setup import attention_backend
from megatron_crossbert.models.specs import require_support
from megatron_crossbert.outputs import require_output_dir
from megatron_crossbert.platform.distributed import check_world_size, launched_world_size
from megatron_crossbert.training.batch_schedule import BatchSchedule
from megatron_crossbert.training.optimizer import build_optimizer, build_scheduler, install_schedule_hooks, wrap_ddp
from megatron_crossbert.training.sampler import PretrainingSampler


@dataclass
class Session:
    """The live objects of one run on this rank."""

    run_cfg: RunConfig
    ddp: torch.nn.Module
    model: torch.nn.Module
    optimizer: object
    scheduler: object
    progress: Progress
    device: torch.device
    batch_schedule: BatchSchedule
    """The global batch and micro-batch count of each step (constant, or a batch-size warmup)."""
    dp_size: int
    checkpoints: CheckpointManager
    """Where the run started, what it saved, and its saves still in flight (``checkpoint.manager``)."""

    @property
    def resumed_from(self) -> Path | None:
        """The checkpoint whose full state this run resumed (None: a fresh start or ``init_from``)."""
        return self.checkpoints.resumed_from

    def save(self, asynchronous: bool | None = None) -> None:
        """Collective: this step's checkpoint (:meth:`CheckpointManager.save`)."""
        self.checkpoints.save(self.model, self.optimizer, self.scheduler, self.progress, asynchronous=asynchronous)


def build_model_chunk(run_cfg: RunConfig) -> torch.nn.Module:
    """This stage's model (embeddings on the first stage, heads on the last)."""
    return build_model(run_cfg, pre_process=parallel_state.is_pipeline_first_stage(),
                       post_process=parallel_state.is_pipeline_last_stage(), training=True)


def check_support(run_cfg: RunConfig) -> None:
    """Refuse, in one line, what this machine or this job cannot run, before anything is built: fp8 or TE
    layers without CUDA and TE (``models.specs.require_support``), an attention backend that cannot train here
    (``models.attention_setup.attention_backend``), an async writer that cannot run here
    (``checkpoint.async_strategy``), a launcher's world size that does not fit TP*PP, no data to
    read, and output directories that cannot be directories. It reads and writes nothing, so it runs before
    the save directory's run lock is taken: a refused run leaves no trace there."""
    require_support(run_cfg.training.precision, run_cfg.model.transformer_impl)
    attention_backend(run_cfg, training=True)
    check_world_size(run_cfg.parallel, launched_world_size())
    run_cfg.checkpoint.check_saving()
    if run_cfg.checkpoint.async_save:
        check_async_writer(run_cfg.checkpoint.async_writer)
    if not run_cfg.data.static_masks:
        run_cfg.data.blend()  # an empty data.data_path is refused naming the key
    for key, path in (("--save (checkpoint.save_dir)", run_cfg.checkpoint.save_dir),
                      ("training.tensorboard_dir", run_cfg.training.tensorboard_dir)):
        if path:
            require_output_dir(path, key)


def build_trainable(run_cfg: RunConfig) -> tuple[torch.nn.Module, torch.nn.Module, object, object]:
    """(model chunk, DDP wrapper, optimizer, scheduler) on an already-initialised platform.

    Shared by ``build_session`` and the throughput benchmark, which builds several models in one
    process and so cannot re-initialise process groups or restore checkpoints per model.
    """
    model = build_model_chunk(run_cfg)
    ddp = wrap_ddp(model, run_cfg)
    install_schedule_hooks(ddp, run_cfg)
    optimizer = build_optimizer(ddp, run_cfg)
    return model, ddp, optimizer, build_scheduler(optimizer, run_cfg)


def build_session(run_cfg: RunConfig, checkpoints: CheckpointManager | None = None) -> Session:
    """Initialise the platform and build model, DDP, optimizer and scheduler; restore state.

    ``checkpoints``: the run's started :class:`CheckpointManager` (``train`` holds its run lock); without
    one it is checked here, unlocked (a caller that runs no loop of its own)."""
    checkpoints = checkpoints or CheckpointManager.check(run_cfg)
    run_cfg = checkpoints.run_cfg
    platform.initialize(run_cfg.parallel, run_cfg.training.seed)
    dp_size = parallel_state.get_data_parallel_world_size()
    batches = BatchSchedule(run_cfg, dp_size, rank=0 if platform.is_rank_zero() else 1)  # rank 0 logs it
    model, ddp, optimizer, scheduler = build_trainable(run_cfg)
    progress = checkpoints.restore(model, optimizer, scheduler)
    return Session(run_cfg, ddp, model, optimizer, scheduler, progress, platform.device(), batches, dp_size,
                   checkpoints)


def dataset_sizes(session: Session) -> tuple[int, int, int]:
    """(train, valid, test) samples to request: the whole schedule (batch warmup included), and one
    fixed validation set."""
    train = session.run_cfg.training
    n_train = session.batch_schedule.total_samples(train.train_iters)
    n_valid = train.eval_iters * train.micro_batch_size * session.dp_size if train.eval_interval > 0 else 0
    return n_train, n_valid, 0


def _batches(session: Session, dataset, total: int, consumed: int):
    """An iterator over this DP rank's micro-batches of ``dataset``'s first ``total`` samples, from sample
    ``consumed`` on (``PretrainingSampler``). The DataLoader has its own generator: creating an iterator
    otherwise draws from the global torch RNG, which would shift the dropout stream of a resumed run against
    an uninterrupted one."""
    cfg = session.run_cfg
    sampler = PretrainingSampler(total, consumed, cfg.training.micro_batch_size,
                                 parallel_state.get_data_parallel_rank(), session.dp_size)
    workers = cfg.data.num_workers
    generator = torch.Generator().manual_seed(cfg.training.seed)
    return iter(torch.utils.data.DataLoader(dataset, batch_sampler=sampler, num_workers=workers, generator=generator,
                                            pin_memory=torch.cuda.is_available(), persistent_workers=workers > 0))


def build_data(session: Session):
    """(train iterator, valid dataset or None). The train sampler starts at the restored position."""
    sizes = dataset_sizes(session)
    train_ds, valid_ds, _ = build_datasets(session.run_cfg, sizes)
    return _batches(session, train_ds, sizes[0], session.progress.consumed_samples), (valid_ds if sizes[1] else None)


def valid_iterator(session: Session, valid_ds):
    """A fresh pass over the same fixed validation samples (comparable across evaluations)."""
    train = session.run_cfg.training
    return _batches(session, valid_ds, train.eval_iters * train.micro_batch_size * session.dp_size, 0)
