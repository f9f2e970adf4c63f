"""Distributed-optimizer checkpoints resume under another TP/PP/DP layout, exactly.

One 2-rank gloo spawn runs every layout change of the issue (TP=2 -> DP=2, PP=2 -> PP=1,
DP=2 -> TP=2) plus the older ``dp_reshardable`` format; each scenario checks the next-step loss
against a continuation at the saved layout, the Adam moments (and every other tensor) gathered from
the reloaded optimizer against the saved ones (bit for bit), and the per-parameter step counts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.training import tiny_config

NO_DROPOUT = dict(model__hidden_dropout=0.0, model__attention_dropout=0.0)
TP2 = dict(parallel__tensor_model_parallel_size=2)
PP2 = dict(parallel__pipeline_model_parallel_size=2)
DP2: dict = {}  # TP=PP=1 on 2 ranks
SCENARIOS = {"tp2_to_dp2": (TP2, DP2), "pp2_to_pp1": (PP2, DP2), "dp2_to_tp2": (DP2, TP2)}
OPTIMIZER_KEYS = ("optimizer.state.exp_avg.", "optimizer.state.exp_avg_sq.")


def _cfg(indexed_corpus: str, save_dir: Path, layout: dict, **extra):
    return tiny_config("crossbert", indexed_corpus, save_dir, parallel__use_distributed_optimizer=True,
                       training__train_iters=3, training__lr=0.01, **layout, **NO_DROPOUT, **extra)


def _adam_steps(optimizer) -> set[float]:
    return {float(state["step"]) for inner in optimizer.chained_optimizers
            for state in inner.optimizer.state.values()}


def _flat_keys(tree: dict, prefix: str = "") -> list[str]:
    return [name for key, value in tree.items()
            for name in (_flat_keys(value, f"{prefix}{key}.") if isinstance(value, dict) else [f"{prefix}{key}"])]


def _compare(saved_dir: Path, reloaded_dir: Path) -> dict:
    """Every tensor of two checkpoints, unsharded (collective): same keys, bit-identical values."""
    from megatron.core.dist_checkpointing import load_plain_tensors
    from megatron.core.dist_checkpointing.dict_utils import diff

    saved, reloaded = load_plain_tensors(str(saved_dir)), load_plain_tensors(str(reloaded_dir))
    only_saved, only_reloaded, unequal = diff(saved, reloaded)
    optim = [key for key in _flat_keys(saved) if key.startswith(OPTIMIZER_KEYS)]
    return {"same_keys": not only_saved and not only_reloaded, "num_optimizer_tensors": len(optim),
            "moment_kinds": sorted({key.split(".")[2] for key in optim}),
            "unequal": [str(item[0]) for item in unequal]}


def _resume_and_check(indexed_corpus: str, root: Path, source: Path, layout: dict,
                      expected: Path | None = None) -> dict:
    """Resume ``source`` at ``layout``, re-save at once (new layout), then train the next step.

    The re-saved tensors are compared with ``expected`` (default: the checkpoint resumed from).
    """
    from megatron_crossbert.checkpoint.directories import resolve_checkpoint_dir
    from megatron_crossbert.checkpoint.save import save_checkpoint
    from megatron_crossbert.training.loop import run_loop
    from megatron_crossbert.training.setup import build_session

    session = build_session(_cfg(indexed_corpus, root / "resumed", layout, checkpoint__load_dir=str(source)))
    steps_after_load = _adam_steps(session.optimizer)
    reloaded = save_checkpoint(session.checkpoints.saves, root / "reloaded", session.model, session.optimizer, session.scheduler,
                               session.progress, session.run_cfg)
    state = run_loop(session)
    return {"compare": _compare(expected or resolve_checkpoint_dir(source), reloaded), "losses": state.losses,
            "steps_after_load": steps_after_load, "steps_after_step": _adam_steps(session.optimizer),
            "iteration": session.progress.iteration}


def _scenario(indexed_corpus: str, root: Path, saved_layout: dict, resumed_layout: dict) -> dict:
    from megatron_crossbert.training import train

    train(_cfg(indexed_corpus, root / "saved", saved_layout), exit_at_iteration=2)
    reference = train(_cfg(indexed_corpus, root / "reference", saved_layout, checkpoint__load_dir=str(root / "saved")))
    result = _resume_and_check(indexed_corpus, root, root / "saved", resumed_layout)
    return {**result, "reference": reference["losses"]}


def _legacy(indexed_corpus: str, root: Path, new_format_root: Path) -> dict:
    """Re-save a DP=2 checkpoint in the old dp_reshardable layout; it must load at DP=2 only."""
    from megatron_crossbert.checkpoint.errors import CheckpointError
    from megatron_crossbert.checkpoint.optimizer_format import LEGACY_DP_RESHARDABLE, read_saved_optimizer
    from megatron_crossbert.checkpoint.save import save_checkpoint
    from megatron_crossbert.training import train
    from megatron_crossbert.training.setup import build_session

    session = build_session(_cfg(indexed_corpus, None, DP2, checkpoint__load_dir=str(new_format_root)))
    old = save_checkpoint(session.checkpoints.saves, root / "old", session.model, session.optimizer, session.scheduler,
                          session.progress, session.run_cfg, sharding_type=LEGACY_DP_RESHARDABLE)
    result = _resume_and_check(indexed_corpus, root / "again", old.parent, DP2,
                               expected=new_format_root / "iter_0000002")
    try:
        train(_cfg(indexed_corpus, None, TP2, checkpoint__load_dir=str(old.parent)))
        refusal = None
    except CheckpointError as err:
        refusal = str(err)
    return {**result, "format": read_saved_optimizer(old, session.run_cfg).sharding_type, "refusal": refusal}


def _worker(rank: int, world_size: int, indexed_corpus: str, root: str) -> dict:
    root = Path(root)
    results = {name: _scenario(indexed_corpus, root / name, saved, resumed)
               for name, (saved, resumed) in SCENARIOS.items()}
    results["legacy"] = _legacy(indexed_corpus, root / "legacy", root / "dp2_to_tp2" / "saved")
    return results


@pytest.mark.multirank
def test_distributed_optimizer_reshards_across_tp_pp_dp(indexed_corpus, tmp_path):
    from tests.support.multirank import run_ranks

    from megatron_crossbert.checkpoint.optimizer_format import LEGACY_DP_RESHARDABLE

    results = run_ranks(_worker, 2, indexed_corpus, str(tmp_path))
    for name in SCENARIOS:
        result = results[0][name]
        compare = result["compare"]
        assert compare["same_keys"] and not compare["unequal"], (name, compare)
        assert compare["moment_kinds"] == ["exp_avg", "exp_avg_sq"] and compare["num_optimizer_tensors"] > 20
        assert result["steps_after_load"] == {2.0} and result["steps_after_step"] == {3.0}, (name, result)
        assert result["iteration"] == 3 and len(result["losses"]) == 1 and len(result["reference"]) == 1
        assert abs(result["losses"][0] - result["reference"][0]) < 1e-5, (name, result)
        assert results[1][name]["losses"] == result["losses"], name
    legacy = results[0]["legacy"]
    assert legacy["format"] == LEGACY_DP_RESHARDABLE
    assert not legacy["compare"]["unequal"] and legacy["compare"]["same_keys"], legacy["compare"]
    assert legacy["losses"] == results[0]["dp2_to_tp2"]["reference"]  # same layout: same next step
    assert legacy["refusal"] is not None and "'dp_reshardable' format" in legacy["refusal"]
    assert "can only be resumed at that TP/PP" in legacy["refusal"].splitlines()[-1]
