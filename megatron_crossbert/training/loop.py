"""The pretraining loop: ``train(run_cfg) -> summary``, importable and CLI-independent.

Per step: forward/backward over the global batch on megatron's schedule, skip on non-finite
values, optimizer + scheduler step, then (at the step boundary, where state is consistent)
logging, validation, probes and periodic checkpoints; before each step the job-wide stop check
(``training.signals``: SIGTERM, SIGINT, SIGUSR1, SIGHUP), after it ``exit_at_iteration``. A stop saves a
checkpoint, says so in one line and returns normally, so the process exits 0.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import torch.distributed as dist

from megatron_crossbert.checkpoint.manager import CheckpointManager
from megatron_crossbert.config import RunConfig
from megatron_crossbert.platform.distributed import is_rank_zero
from megatron_crossbert.training.hooks import ProbeFn, InTrainingProbes
from megatron_crossbert.training.logging import MetricsLogger
from megatron_crossbert.training.optimizer import current_lr
from megatron_crossbert.training.setup import (
    Session, build_data, build_session, check_support, valid_iterator,
)
from megatron_crossbert.training.signals import StopSignal
from megatron_crossbert.training.steps import StepResult, evaluate, train_step


class NonFiniteLossError(RuntimeError):
    """Too many consecutive steps with Inf/NaN loss or gradients."""


@dataclass
class LoopState:
    """Per-run bookkeeping that is not part of the checkpoint."""

    losses: list[float] = field(default_factory=list)
    grad_norms: list[float | None] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    """Global batch of each step (constant, or the batch-size warmup's)."""
    lrs: list[float] = field(default_factory=list)
    """Learning rate each step applied."""
    step_times: list[float] = field(default_factory=list)
    valid_losses: dict[int, float] = field(default_factory=dict)
    nonfinite_in_a_row: int = 0
    skipped_steps: int = 0
    stopped_by_signal: bool = False
    stop_reason: str | None = None
    """Why the run stopped before ``train_iters``: the signal's name, or ``--exit-at-iteration``."""


def _model_flops(run_cfg: RunConfig) -> float | None:
    try:
        from megatron_crossbert.models import model_flops_per_sample
    except ImportError:
        return None
    return float(model_flops_per_sample(run_cfg))


def check_exit_iteration(exit_at: int | None, start_iteration: int) -> None:
    """``--exit-at-iteration`` is a total step count after the step this run starts from."""
    if exit_at is None:
        return
    if exit_at < 1:
        raise ValueError(f"--exit-at-iteration must be >= 1 (a total step count), got {exit_at}")
    if exit_at <= start_iteration:
        raise ValueError(f"--exit-at-iteration {exit_at} is not after the resumed step {start_iteration}: "
                         f"nothing would be trained; give a larger value")


def _account(result: StepResult, state: LoopState, max_nonfinite: int, iteration: int) -> None:
    """Track losses and the consecutive non-finite count; raise once it reaches the limit."""
    state.losses.append(result.loss)
    state.grad_norms.append(result.grad_norm)
    state.skipped_steps += int(result.skipped)
    state.nonfinite_in_a_row = state.nonfinite_in_a_row + 1 if result.nonfinite else 0
    if state.nonfinite_in_a_row >= max_nonfinite:
        raise NonFiniteLossError(
            f"stopping at step {iteration}: {state.nonfinite_in_a_row} consecutive steps had a non-finite "
            f"loss or gradient norm (max_nonfinite_steps={max_nonfinite}); last loss {result.loss}. "
            f"Lower the learning rate, check the data, or resume from an earlier checkpoint.")


def _after_step(session: Session, state: LoopState, logger: MetricsLogger, probes: InTrainingProbes, valid_ds) -> None:
    """Logging, then validation, probes and periodic saves (timed out of the throughput figures)."""
    cfg, it = session.run_cfg, session.progress.iteration
    if it % cfg.training.log_interval == 0 or it == cfg.training.train_iters:
        logger.log_step(it, current_lr(session.optimizer), state.grad_norms[-1])
    start = time.perf_counter()
    if valid_ds is not None and it % cfg.training.eval_interval == 0:
        loss = evaluate(session.ddp, valid_iterator(session, valid_ds), cfg, cfg.training.eval_iters, session.device)
        state.valid_losses[it] = loss
        logger.log_validation(it, loss)
    if probes.due(it):
        probes(session.model, it)
    session.checkpoints.commit_finished()
    interval = cfg.checkpoint.save_interval
    if interval and it % interval == 0:
        session.save()
    logger.exclude(time.perf_counter() - start)


def _signalled(session: Session, stop: StopSignal, state: LoopState) -> bool:
    """Job-wide: a stop signal on any rank (a collective, before every step, the first one included)."""
    state.stopped_by_signal = stop.requested(device=session.device)
    state.stop_reason = stop.name
    return state.stopped_by_signal


def _exits_here(session: Session, state: LoopState, exit_at: int | None) -> bool:
    """The requested exit iteration is reached (a stop without a signal, like a preemption)."""
    it = session.progress.iteration
    if exit_at is None or it < exit_at or it >= session.run_cfg.training.train_iters:
        return False
    state.stop_reason = "--exit-at-iteration"
    return True


def _stop_line(session: Session, state: LoopState) -> str:
    """What a stopped run saved, in one line (rank 0 prints it once the save is committed)."""
    it, ckpt = session.progress.iteration, session.run_cfg.checkpoint
    if not state.losses:
        return f"stopped before the first step of this run ({state.stop_reason}, step {it}): nothing new to save"
    if not ckpt.save_dir:
        return f"stopped at step {it} ({state.stop_reason}): nothing saved (checkpoint.save_dir is not set)"
    resumes = "" if ckpt.resume_from or ckpt.load_dir else "; the same command resumes from it"
    return f"stopped at step {it} ({state.stop_reason}): saved {session.checkpoints.latest}{resumes}"


def _finish(session: Session, state: LoopState, logger: MetricsLogger) -> None:
    """The run's last save, synchronous (the process exits right after it: no writer to fork), then,
    after a stop, the one line that says what was saved. A stop before this run's first step saves
    nothing: the state is the one it started from."""
    if state.losses or not state.stop_reason:
        session.save(asynchronous=False)
    session.checkpoints.finish()
    if state.stop_reason:
        logger.print(_stop_line(session, state))


def _one_step(session: Session, train_iter, state: LoopState, logger: MetricsLogger) -> None:
    """One optimizer step over this step's global batch (the batch schedule's at the samples consumed
    so far), then progress and loss bookkeeping."""
    cfg, start = session.run_cfg, time.perf_counter()
    batch, num_micro = session.batch_schedule.at(session.progress.consumed_samples)
    state.lrs.append(current_lr(session.optimizer))
    result = train_step(session.ddp, session.optimizer, session.scheduler, train_iter, cfg, num_micro, session.device)
    session.progress.iteration += 1
    session.progress.consumed_samples += batch
    state.step_times.append(time.perf_counter() - start)
    state.batch_sizes.append(batch)
    logger.record(result.loss_sum, result.num_tokens, result.skipped, samples=batch)
    _account(result, state, cfg.training.max_nonfinite_steps, session.progress.iteration)


def _make_logger(session: Session) -> MetricsLogger:
    world = dist.get_world_size() if dist.is_initialized() else 1
    flops = _model_flops(session.run_cfg)
    logger = MetricsLogger(session.run_cfg, world_size=world, flops_per_sample=flops, enabled=is_rank_zero(),
                           start_iteration=session.progress.iteration)
    logger.print(session.model.attention.describe())
    if session.resumed_from is not None:
        logger.print(f"resumed from {session.resumed_from} at step {session.progress.iteration}, "
                     f"{session.progress.consumed_samples} samples consumed")
    return logger


def run_loop(session: Session, exit_at_iteration: int | None = None, probe_fn: ProbeFn | None = None,
             stop: StopSignal | None = None) -> LoopState:
    """Train until train_iters or a stop request; always ends with a checkpoint when saving.

    ``stop``: handlers ``train`` installed before start-up; without one the loop installs its own."""
    cfg, state = session.run_cfg, LoopState()
    train_iter, valid_ds = build_data(session)
    logger = _make_logger(session)
    probes = InTrainingProbes(cfg, logger, probe_fn)
    with contextlib.ExitStack() as stack:
        stop = stop or stack.enter_context(StopSignal())
        stack.callback(logger.close)
        while session.progress.iteration < cfg.training.train_iters and not _signalled(session, stop, state):
            _one_step(session, train_iter, state, logger)
            _after_step(session, state, logger, probes, valid_ds)
            if _exits_here(session, state, exit_at_iteration):
                break
        _finish(session, state, logger)
    return state


def train(run_cfg: RunConfig, *, exit_at_iteration: int | None = None, probe_fn: ProbeFn | None = None) -> dict:
    """Pretrain according to ``run_cfg``; resumes from the configured checkpoint when there is one.

    ``exit_at_iteration`` stops (with a checkpoint) after that many total steps without changing
    the LR schedule, like a preemption. ``probe_fn`` runs the in-training probes of
    ``training.probe_tasks`` (see ``hooks.py``). Returns a summary dict (identical on every rank).
    The run's checkpoints go through one front door (``checkpoint.manager.CheckpointManager``): rank 0 holds
    ``save_dir``'s run lock for the whole run, so a second run into the same directory is refused before it
    reads or writes anything there; what this machine cannot run is refused before the lock
    (``setup.check_support``), so such a run leaves the directory untouched.
    """
    with StopSignal() as stop:  # from here on a stop signal stops the run at a step boundary
        check_support(run_cfg)
        check_exit_iteration(exit_at_iteration, 0)
        with CheckpointManager.start(run_cfg) as checkpoints:
            session = build_session(run_cfg, checkpoints)
            start_iteration = session.progress.iteration
            check_exit_iteration(exit_at_iteration, start_iteration)
            state = run_loop(session, exit_at_iteration, probe_fn, stop)
    return {
        "iteration": session.progress.iteration, "start_iteration": start_iteration,
        "consumed_samples": session.progress.consumed_samples, "losses": state.losses,
        "final_loss": state.losses[-1] if state.losses else None, "grad_norms": state.grad_norms,
        "batch_sizes": state.batch_sizes, "lrs": state.lrs,
        "valid_losses": state.valid_losses, "skipped_steps": state.skipped_steps,
        "step_times": state.step_times,
        "checkpoint": str(session.checkpoints.latest) if session.checkpoints.latest else None,
        "stopped_by_signal": state.stopped_by_signal, "stop_reason": state.stop_reason,
        "resumed_from": str(session.resumed_from) if session.resumed_from else None,
    }
