"""Compiled FlexAttention compiles once per shape and never falls back silently.

``torch.compile(flex_attention, dynamic=False)`` makes one kernel per input shape (batch, heads, query and key
length, head dim), and Dynamo recompiles one function at most ``recompile_limit`` times (8 by default). Past
that it quietly runs flex's unfused eager path, which builds the whole score matrix and has a far slower
backward: a speed comparison would come out false. So every run (and every benchmark plan, which builds many
models in one process) registers the shapes it will make, before its first step: the limit is raised to the
number of distinct shapes registered in this process, a limit hit inside a compiled flex call raises instead of
falling back (``strict_recompiles``, scoped to those calls: any other ``torch.compile`` in the process keeps
torch's own behaviour), and each recompile is logged (torch's ``recompiles`` log). The compiled block-mask
builder shares the rule (one compiled ``create_block_mask``, one graph per shape), so it is covered by the same
limit and the same scope.

Only training compiles: in eval mode (evaluation, ``encode()``, probes with padded batches of every length)
CoreAttention runs SDPA over the same masks, so no length ever compiles a kernel there
(``core_attention.uses_flex``; the training forward that activation recompute runs under ``no_grad`` stays flex).
"""

from __future__ import annotations

import logging
from functools import lru_cache

from megatron_crossbert.arch_rules import sample_layout
from megatron_crossbert.config import RunConfig

DYNAMO_DEFAULT_RECOMPILE_LIMIT = 8
"""torch's own default; the limit is never lowered below it."""

_LOG = logging.getLogger(__name__)
_REGISTERED: set[tuple[int, int, int, int, int]] = set()


def flex_shapes(run_cfg: RunConfig) -> set[tuple[int, int, int, int, int]]:
    """``(batch, heads per TP rank, queries, keys, head_dim)`` of every compiled flex call of a training step.

    Windows and document masks change the block mask's contents, not its shapes (the window lives in the
    key-range tensors the mask_mod reads), so they add no shape.
    """
    tp = run_cfg.parallel.tensor_model_parallel_size
    return {(call.batch, call.heads // tp, call.queries, call.keys, call.head_dim)
            for call in sample_layout(run_cfg.model.arch).attention_calls(run_cfg)}


def union_flex_shapes(run_cfgs) -> set[tuple[int, int, int, int, int]]:
    """The union over every run one process builds (a benchmark plan's cases)."""
    return set().union(*(flex_shapes(run_cfg) for run_cfg in run_cfgs))


def recompile_limit(shape_count: int) -> int:
    """The Dynamo recompile limit that lets ``shape_count`` distinct shapes compile."""
    return max(DYNAMO_DEFAULT_RECOMPILE_LIMIT, shape_count)


@lru_cache(maxsize=1)
def _watch_recompiles() -> None:
    import torch

    torch._logging.set_logs(recompiles=True)


def strict_recompiles():
    """Context of one compiled flex call (kernel or block mask): a recompile limit hit raises there instead of
    silently running flex's eager path; outside it the process-global setting is left as torch has it."""
    import torch

    return torch._dynamo.config.patch(fail_on_recompile_limit_hit=True)


def register_flex_shapes(shapes: set) -> int:
    """Add a run's shapes to this process's set and raise Dynamo's limit to cover them; returns the limit."""
    import torch

    new = set(shapes) - _REGISTERED
    _REGISTERED.update(shapes)
    _watch_recompiles()
    limit = max(torch._dynamo.config.recompile_limit, recompile_limit(len(_REGISTERED)))
    torch._dynamo.config.recompile_limit = limit
    if new:
        _LOG.info("flex attention: %d compiled shapes in this process (%d new); Dynamo recompile limit %d",
                  len(_REGISTERED), len(new), limit)
    return limit
