"""crossbert-finetune's pure parts: GLUE metrics against scipy and scikit-learn, the presets (as read in
Cramming's and ModernBERT's repositories), override labelling, Composer's decoupled weight decay as torch
AdamW's, and the summary (median of seeds at the best lr)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from megatron_crossbert.evaluation.finetune.presets import PRESETS, get_preset
from megatron_crossbert.evaluation.finetune.report import render_markdown, summarize_task
from megatron_crossbert.evaluation.tasks.glue import GLUE_FORMATS
from megatron_crossbert.evaluation.tasks.metrics import compute_metrics


@pytest.mark.parametrize("seed", range(4))
def test_metrics_match_scipy_and_sklearn(seed):
    rng = np.random.default_rng(seed)
    y, p = rng.integers(0, 2, 300), rng.integers(0, 2, 300)
    got = compute_metrics(("accuracy", "f1", "matthews"), y, p)
    assert got["accuracy"] == 100 * accuracy_score(y, p)
    assert got["f1"] == 100 * f1_score(y, p)
    assert got["matthews"] == 100 * matthews_corrcoef(y, p)
    s, t = rng.uniform(0, 5, 300), rng.uniform(0, 5, 300)
    got = compute_metrics(("pearson", "spearman"), s, t)
    assert got["pearson"] == 100 * pearsonr(s, t)[0] and got["spearman"] == 100 * spearmanr(s, t)[0]


def test_glue_metrics_per_task():
    """CoLA: Matthews; MRPC: F1 and accuracy; STS-B: Pearson and Spearman; the rest: accuracy."""
    assert GLUE_FORMATS["CoLA"].metrics == ("matthews",)
    assert GLUE_FORMATS["MRPC"].metrics == ("f1", "accuracy")
    assert set(GLUE_FORMATS["STS-B"].metrics) == {"pearson", "spearman"}
    assert all(GLUE_FORMATS[task].metrics == ("accuracy",) for task in ("RTE", "SST-2", "QNLI", "WNLI", "MNLI"))


def test_presets_are_the_peers_settings():
    cramming, modern = get_preset("cramming"), get_preset("modernbert")
    assert (cramming.lrs, cramming.seeds_for("RTE"), cramming.epochs_for("CoLA"), cramming.batch_size_for("RTE"),
            cramming.max_len, cramming.schedule, cramming.warmup_ratio, cramming.betas, cramming.eps,
            cramming.torch_weight_decay("RTE", 4e-5), cramming.grad_clip) == (
        (4e-5,), (0,), 5, 16, 128, "cosine", 0.1, (0.9, 0.98), 1e-6, 0.0, None)
    assert modern.lrs == (1e-5, 3e-5, 5e-5, 8e-5) and (modern.max_len, modern.schedule, modern.warmup_ratio) == (
        256, "linear", 0.06)
    assert modern.seeds_for("RTE") == (19, 8364, 717, 10536, 90166) and len(modern.seeds_for("CoLA")) == 4
    assert modern.seeds_for("SST-2") == (19, 8364, 717) and modern.seeds_for("QNLI") == (19,)
    assert [(modern.epochs_for(t), modern.batch_size_for(t)) for t in ("RTE", "MRPC", "STS-B", "CoLA", "SST-2")] == [
        (3, 16), (10, 32), (10, 32), (10, 32), (3, 16)]
    assert modern.torch_weight_decay("MRPC", 8e-5) == pytest.approx(0.1)  # glue_jobs.py: wd 8e-6 at lr 8e-5
    with pytest.raises(ValueError, match="unknown preset 'bert'"):
        get_preset("bert")


def test_decoupled_weight_decay_is_torch_adamw_with_decay_over_lr():
    """Composer's DecoupledAdamW shrinks by wd * lr_t / lr_0 then steps Adam; torch AdamW at wd / lr_0 does too."""
    lr0, wd, grads = 3e-3, 0.05, [torch.randn(4, 3, generator=torch.Generator().manual_seed(i)) for i in range(6)]
    ours, theirs = torch.ones(4, 3, requires_grad=True), torch.ones(4, 3, requires_grad=True)
    opt_ours = torch.optim.AdamW([ours], lr=lr0, weight_decay=wd / lr0)
    opt_theirs = torch.optim.Adam([theirs], lr=lr0)
    sched = [torch.optim.lr_scheduler.LinearLR(o, 1.0, 0.0, total_iters=6) for o in (opt_ours, opt_theirs)]
    for grad in grads:
        with torch.no_grad():
            theirs.mul_(1 - wd * opt_theirs.param_groups[0]["lr"] / lr0)  # Composer's decoupled decay
        for param, opt, s in ((ours, opt_ours, sched[0]), (theirs, opt_theirs, sched[1])):
            param.grad = grad.clone()
            opt.step()
            s.step()
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
    assert not torch.allclose(ours, torch.ones(4, 3))


def test_overrides_rename_the_preset():
    base = PRESETS["cramming"]
    assert base.with_overrides(lrs=None, epochs=None) is base
    assert base.with_overrides(lrs=(4e-5,)).label == "cramming"  # the preset's own value is no override
    changed = get_preset("modernbert").with_overrides(lrs=(2e-5,), seeds=(1, 2))
    assert changed.label == "modernbert+overrides" and changed.overrides == ("lrs=(2e-05,)", "seeds=(1, 2)")
    assert changed.seeds_for("RTE") == (1, 2) and changed.epochs_for("RTE") == 3  # per-task seeds gave way


def _record(task: str, lr: float, seed: int, score: float) -> dict:
    spec = {"task": task, "lr": lr, "seed": seed, "epochs": 3, "batch_size": 16, "max_len": 128,
            "schedule": "linear", "warmup_ratio": 0.06, "betas": [0.9, 0.98], "eps": 1e-6, "weight_decay": 0.0,
            "decay_all_params": False, "grad_clip": None, "max_train": None, "max_dev": None}
    metrics = {name: score + i for i, name in enumerate(GLUE_FORMATS[task].metrics)}
    result = {"score": float(np.mean(list(metrics.values()))), "metrics": metrics, "wall_s": 1.0, "cpu_s": 2.0,
              "n_train": 10, "n_dev": 5, "device": "cpu", "threads": 1}
    return {"key": {"spec": spec}, "result": result}


def test_summary_takes_the_median_of_seeds_at_the_best_lr():
    runs = [_record("RTE", 1e-5, s, v) for s, v in zip((1, 2, 3), (60.0, 70.0, 99.0))]  # median 70: a lucky seed
    runs += [_record("RTE", 3e-5, s, v) for s, v in zip((1, 2, 3), (71.0, 72.0, 50.0))]  # median 71: chosen
    out = summarize_task("RTE", runs, get_preset("modernbert"))
    assert out["best_lr"] == 3e-5 and out["median"] == {"score": 71.0, "accuracy": 71.0}
    assert out["mean"]["accuracy"] == pytest.approx(193 / 3) and out["per_lr"]["1e-05"]["median"]["score"] == 70.0
    assert out["n_seeds"] == 3 and out["hyper_parameters"]["lr"] == 3e-5 and out["cpu_s"] == 12.0
    tie = summarize_task("MRPC", [_record("MRPC", 5e-5, 0, 80.0), _record("MRPC", 2e-5, 0, 80.0)],
                         get_preset("cramming"))
    assert tie["best_lr"] == 2e-5 and tie["median"] == {"score": 80.5, "f1": 80.0, "accuracy": 81.0}


def test_markdown_names_the_preset_and_the_overrides():
    preset = get_preset("cramming").with_overrides(epochs=1)
    task = summarize_task("STS-B", [_record("STS-B", 4e-5, 0, 85.0)], preset)
    report = {"preset": preset.to_json(), "model": {"hf_path": "m"}, "tasks": {"STS-B": task},
              "glue_score_partial": task["median"]["score"], "selection": "s", "scored_on": "dev",
              "skipped_tasks": ["QNLI: dev set only"]}
    text = render_markdown(report)
    assert "preset **cramming+overrides** (overrides: epochs=1)" in text
    assert f"| STS-B | {' / '.join(GLUE_FORMATS['STS-B'].metrics)} | 85.00 / 86.00 | 1 | 4e-05 | 3 | 16 |" in text
    assert "Left out: QNLI: dev set only." in text


def test_a_python_caller_gets_the_same_checks_as_the_cli():
    """The checks live in the library's config types, so ``run_finetune``'s callers get them without the CLI."""
    from megatron_crossbert.evaluation.finetune.presets import get_preset
    from megatron_crossbert.evaluation.finetune.runner import FinetuneConfig

    preset = get_preset("cramming")
    with pytest.raises(ValueError, match=r"--epochs \(Preset.epochs\): must be at least 1, got 0"):
        preset.with_overrides(epochs=0)
    with pytest.raises(ValueError, match=r"--lr \(Preset.lrs\): learning rates must be positive"):
        preset.with_overrides(lrs=(1e-4, -1.0))
    with pytest.raises(ValueError, match=r"--max-dev \(FinetuneConfig.max_dev\): must be at least 1, got 0"):
        FinetuneConfig(preset=preset, max_dev=0)
