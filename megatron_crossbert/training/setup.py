"""Build everything a training run needs, in megatron's order, from one RunConfig.

Order matters: the platform (process groups, CPU patches, RNG seeding) first, then the model chunk
of this pipeline stage, DDP, optimizer and scheduler, then the checkpoint (which restores RNG and
the data position), and only then the data loaders, whose samplers start at the restored
consumed-sample count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from megatron.core import parallel_state

from megatron_crossbert import platform
from megatron_crossbert.checkpoint.context_extension import grown_tables
from megatron_crossbert.checkpoint.data_record import check_dataset_contents
from megatron_crossbert.checkpoint.load import load_checkpoint, read_model_weights
from megatron_crossbert.checkpoint.save import RunSaves
from megatron_crossbert.checkpoint.save_errors import check_room_to_start
from megatron_crossbert.checkpoint.start_guard import StartPlan, apply_plan, plan_start
from megatron_crossbert.checkpoint.state import Progress
from megatron_crossbert.checkpoint.tokenizer_record import check_dataset_tokenizers
from megatron_crossbert.checkpoint.verify import VerifiedCheckpoint, schedule_for_resume, verify_contents
from megatron_crossbert.config import RunConfig
from megatron_crossbert.outputs import require_output_dir
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
    resumed_from: Path | None = None
    saves: RunSaves = field(default_factory=RunSaves)
    """This run's checkpoint saves: the ones it completed and the background ones in flight."""


def build_model_chunk(run_cfg: RunConfig) -> torch.nn.Module:
    """This stage's model (embeddings on the first stage, heads on the last)."""
    from megatron_crossbert.models import build_model

    return build_model(run_cfg, pre_process=parallel_state.is_pipeline_first_stage(),
                       post_process=parallel_state.is_pipeline_last_stage(), training=True)


def check_support(run_cfg: RunConfig) -> None:
    """Refuse, in one line, settings this machine cannot honour: fp8 or TE layers without CUDA and TE
    (``models.specs.require_support``), an attention backend that cannot train here
    (``models.attention_plan``). It reads and writes nothing, so it runs before the save directory's
    run lock is taken: a refused run leaves no trace there."""
    from megatron_crossbert.models.attention_plan import attention_plan
    from megatron_crossbert.models.specs import require_support

    require_support(run_cfg.training.precision, run_cfg.model.transformer_impl)
    attention_plan(run_cfg, training=True)
    check_job_shape(run_cfg)


def check_job_shape(run_cfg: RunConfig) -> None:
    """What the config cannot tell alone but the job can, before anything is built: the launcher's world
    size fits TP*PP, there is data to read, and the output directories can be directories."""
    from megatron_crossbert.platform.distributed import check_world_size, launched_world_size

    check_world_size(run_cfg.parallel, launched_world_size())
    run_cfg.checkpoint.check_saving()
    if not run_cfg.data.static_masks:
        run_cfg.data.blend()  # an empty data.data_path is refused naming the key
    for key, path in (("--save (checkpoint.save_dir)", run_cfg.checkpoint.save_dir),
                      ("training.tensorboard_dir", run_cfg.training.tensorboard_dir)):
        if path:
            require_output_dir(path, key)


def check_exit_iteration(exit_at: int | None, start_iteration: int) -> None:
    """``--exit-at-iteration`` is a total step count after the step this run starts from."""
    if exit_at is None:
        return
    if exit_at < 1:
        raise ValueError(f"--exit-at-iteration must be >= 1 (a total step count), got {exit_at}")
    if exit_at <= start_iteration:
        raise ValueError(f"--exit-at-iteration {exit_at} is not after the resumed step {start_iteration}: "
                         f"nothing would be trained; give a larger value")


def check_sources(run_cfg: RunConfig) -> StartPlan:
    """Before building or writing anything: refuse what this machine cannot honour (:func:`check_support`),
    decide where to start and verify that checkpoint once (``checkpoint.start_guard.plan_start``:
    shapes, optimizer layout, LR schedule, tokenizer), refuse a save dir that cannot hold the next
    checkpoint (before TensorBoard writes its first event), then check the datasets' tokenizers and that each
    ``.bin``/``.idx`` pair is the one preprocessing recorded. The
    plan's ``source`` then drives the load."""
    check_support(run_cfg)
    plan = plan_start(run_cfg)
    check_room_to_start(run_cfg.checkpoint.save_dir)
    check_dataset_tokenizers(run_cfg)
    check_dataset_contents(run_cfg)
    return plan


def restore(session: Session, source: VerifiedCheckpoint | None) -> None:
    """Resume full state from a verified checkpoint, or load only its weights (init_from)."""
    if source is None:
        return
    if not source.weights_only:
        session.progress = load_checkpoint(source, session.model, session.optimizer, session.scheduler,
                                           session.run_cfg)
        session.resumed_from = source.directory
        return
    read_model_weights(session.model, source, grown_tables(source.saved, session.run_cfg))
    # bf16 keeps fp32 main params inside the optimizer; refresh them from the loaded weights.
    reload = getattr(session.optimizer, "reload_model_params", None)
    if reload is not None:
        reload()


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


def build_session(run_cfg: RunConfig) -> Session:
    """Initialise the platform and build model, DDP, optimizer and scheduler; restore state."""
    plan = check_sources(run_cfg)
    run_cfg = schedule_for_resume(run_cfg, plan.source)
    platform.initialize(run_cfg.parallel, run_cfg.training.seed)
    if run_cfg.checkpoint.save_dir:  # the same on every rank; all have planned (initialize is a rendezvous)
        if platform.is_rank_zero():  # finish a killed commit, remove stale temporaries, --overwrite
            apply_plan(plan, run_cfg.checkpoint.save_dir)
        torch.distributed.barrier()
    dp_size = parallel_state.get_data_parallel_world_size()
    batches = BatchSchedule(run_cfg, dp_size, rank=0 if platform.is_rank_zero() else 1)  # rank 0 logs it
    model, ddp, optimizer, scheduler = build_trainable(run_cfg)
    session = Session(run_cfg, ddp, model, optimizer, scheduler, Progress(), platform.device(), batches, dp_size)
    if plan.source is not None:  # the checksum check, shared by every rank of the job
        restore(session, verify_contents(plan.source, run_cfg.checkpoint.verify, collective=True))
        plan.source.release()  # read: a run writing into its directory may prune it again
    return session


def dataset_sizes(run_cfg: RunConfig, dp_size: int) -> tuple[int, int, int]:
    """(train, valid, test) samples to request: the whole schedule (batch warmup included), and one
    fixed validation set."""
    train = run_cfg.training
    n_train = BatchSchedule(run_cfg, dp_size).total_samples(train.train_iters)
    n_valid = train.eval_iters * train.micro_batch_size * dp_size if train.eval_interval > 0 else 0
    return n_train, n_valid, 0


def _loader(dataset, sampler: PretrainingSampler, run_cfg: RunConfig):
    """A DataLoader with its own generator: creating an iterator otherwise draws from the global
    torch RNG, which would shift the dropout stream of a resumed run against an uninterrupted one."""
    workers = run_cfg.data.num_workers
    generator = torch.Generator().manual_seed(run_cfg.training.seed)
    return torch.utils.data.DataLoader(dataset, batch_sampler=sampler, num_workers=workers, generator=generator,
                                       pin_memory=torch.cuda.is_available(), persistent_workers=workers > 0)


def build_data(session: Session):
    """(train iterator, valid dataset or None). The train sampler starts at the restored position."""
    from megatron_crossbert.data.build import build_datasets

    cfg = session.run_cfg
    sizes = dataset_sizes(cfg, session.dp_size)
    train_ds, valid_ds, _ = build_datasets(cfg, sizes)
    dp_rank = parallel_state.get_data_parallel_rank()
    sampler = PretrainingSampler(sizes[0], session.progress.consumed_samples, cfg.training.micro_batch_size,
                                 dp_rank, session.dp_size)
    return iter(_loader(train_ds, sampler, cfg)), (valid_ds if sizes[1] else None)


def valid_iterator(session: Session, valid_ds):
    """A fresh pass over the same fixed validation samples (comparable across evaluations)."""
    cfg = session.run_cfg
    total = cfg.training.eval_iters * cfg.training.micro_batch_size * session.dp_size
    sampler = PretrainingSampler(total, 0, cfg.training.micro_batch_size,
                                 parallel_state.get_data_parallel_rank(), session.dp_size)
    return iter(_loader(valid_ds, sampler, cfg))
