"""examples/: every file documents its usage, the YAML configs validate, and the tiny CPU example
runs end to end (corpus -> tokenizer -> preprocess -> torchrun) with DP=2, then TP=2 and PP=2.

The three torchrun runs are kept to a few steps; data preparation happens once (the script skips
steps whose outputs exist).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"
_RENDEZVOUS_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")


def test_every_example_opens_with_usage():
    files = sorted(p for p in EXAMPLES.iterdir() if p.is_file())
    names = {p.name for p in files}
    assert {"tiny_cpu.yaml", "train_tiny_cpu.sh", "single_node_8gpu.sh", "multi_node.sh", "slurm.sbatch",
            "crossbert_base.yaml", "crossbert_large.yaml", "modernbert_style.yaml"} <= names
    for path in files:
        head = path.read_text().splitlines()[:3]
        assert any("Usage" in line for line in head), path.name


@pytest.mark.parametrize("name", ["tiny_cpu.yaml", "crossbert_base.yaml", "crossbert_large.yaml",
                                  "crossbert_modern_base.yaml"])
def test_example_configs_validate(name):
    from megatron_crossbert.config import load_run_config

    cfg = load_run_config(EXAMPLES / name)
    assert cfg.model.arch == "crossbert"
    if name != "tiny_cpu.yaml":
        assert cfg.training.precision == "bf16" and cfg.data.seq_length == (1024 if "modern" in name else 512)
    if "modern" in name:  # ModernBERT's phase 1: local/global windows, both RoPE bases 10000
        assert (cfg.model.local_attention, cfg.model.global_attn_every_n_layers, cfg.model.rotary_base) == (128, 3, 1e4)
    if "modern" in name:  # the MLM baseline of the header's command line validates too
        mlm = load_run_config(EXAMPLES / name, ["model.arch=mlm", "model.decoder_num_layers=0",
                                                "masking.bert_mask_prob=0.3"])
        assert mlm.model.encoder == "modern"


def test_modernbert_style_example_loads_and_trains_on_its_schedules(indexed_corpus, tmp_path):
    """The ModernBERT-style YAML: its token budgets hold, and a few steps of it train through WSD, the batch
    warmup and the masking-rate schedule (dimensions and batch sizes shrunk to a CPU)."""
    from megatron_crossbert import schedules
    from megatron_crossbert.config import load_run_config
    from megatron_crossbert.training import train

    from tests.support.training import tiny_overrides

    cfg = load_run_config(EXAMPLES / "modernbert_style.yaml")
    train_cfg, seq = cfg.training, cfg.data.seq_length
    assert (cfg.model.arch, cfg.model.sparse_prediction, train_cfg.lr_decay_style) == ("mlm", True, "WSD")
    assert (cfg.model.local_attention, cfg.model.global_attn_every_n_layers, cfg.data.document_mask) == (128, 3, True)
    assert (cfg.model.num_layers - 1) % cfg.model.global_attn_every_n_layers == 0   # the last layer is global
    points = schedules.sample_points(train_cfg.batch_step_schedule(seq), seq)
    assert points[-1] == (50_000_000_000 // seq, 4608)                           # the warmup spans 50B tokens
    assert schedules.consumed_after(points, train_cfg.train_iters) * seq >= 1.719e12   # 1.719T tokens
    assert schedules.consumed_after(points, train_cfg.train_iters - 1) * seq < 1.719e12
    assert schedules.consumed_after(points, train_cfg.lr_warmup_iters - 1) * seq < 3e9 <= (
        schedules.consumed_after(points, train_cfg.lr_warmup_iters) * seq)       # 3B-token LR warmup
    small = tiny_overrides("mlm", indexed_corpus, tmp_path / "ckpt", model__encoder="modern", model__ffn_hidden_size=64,
                           model__decoder_num_layers=0, training__train_iters=6, training__lr_warmup_iters=1,
                           training__global_batch_size=6, training__rampup_batch_size=[2, 2, 8],
                           training__lr_wsd_decay_fraction=0.5,
                           training__precision="fp32", training__eval_interval=3,
                           masking__bert_mask_prob_schedule="0:0.3 256:0.15")
    summary = train(load_run_config(EXAMPLES / "modernbert_style.yaml", small))
    assert summary["iteration"] == 6 and summary["batch_sizes"] == [2, 2, 4, 6, 6, 6]
    lrs = summary["lrs"]                                                         # warmup 1, stable, 1-sqrt decay
    assert lrs[1:4] == [8e-4] * 3 and 8e-4 > lrs[4] > lrs[5] > 0 and set(summary["valid_losses"]) == {3, 6}


def test_context_extension_example_continues_the_modern_base_run():
    from megatron_crossbert.checkpoint.context_extension import extension_of
    from megatron_crossbert.config import load_run_config

    base = load_run_config(EXAMPLES / "crossbert_modern_base.yaml")
    long = load_run_config(EXAMPLES / "crossbert_modern_8k.yaml", ["checkpoint.init_from=CKPT"])
    assert (long.data.seq_length, long.model.max_position_embeddings, long.model.rotary_base) == (8192, 8192, 160000)
    assert (long.model.local_attention, long.model.local_rotary_base) == (base.model.local_attention, 10000)
    assert not extension_of(base, long).refusals


def _run_tiny(work: Path, extra: str = "", **env) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in _RENDEZVOUS_VARS}
    clean.update(CORPUS_BYTES="300000", EXTRA_ARGS=f"--set training.log_interval=1 {extra}", **env)
    done = subprocess.run(["bash", str(EXAMPLES / "train_tiny_cpu.sh"), str(work)], env=clean, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


@pytest.mark.e2e
def test_tiny_example_runs_with_dp_tp_and_pp(tmp_path):
    from megatron_crossbert.checkpoint.directories import latest_iteration
    from tests.support.training import read_run_config

    from tests.support.synthetic_eval import write_jsonl_task, write_mteb_lite_fixture

    work = tmp_path / "tiny"
    probe = write_jsonl_task(tmp_path / "probe" / "toy", n_train=40, n_test=20)
    mteb_dir = write_mteb_lite_fixture(tmp_path / "mteb_lite", pairs=20)
    probes = f"--set training.probe_interval=4 --set training.probe_tasks=['jsonl:{probe}','mteb:{mteb_dir}']"
    out = _run_tiny(work, probes, NPROC="2", TRAIN_ITERS="4")
    assert "step 4/4" in out and "supervised tokens/s" in out and out.count("summary ") == 1
    assert "step 4 | probe: toy/accuracy" in out  # the evaluation package's in-training probe hook
    assert "mteb/ToySTSA/cosine_spearman" in out and "mteb/avg" in out  # STS Spearman, scored by mteb
    assert latest_iteration(work / "ckpt_crossbert_tp1_pp1_n2") == 4
    for layout, name in (({"TP": "2"}, "ckpt_crossbert_tp2_pp1_n2"), ({"PP": "2"}, "ckpt_crossbert_tp1_pp2_n2")):
        out = _run_tiny(work, NPROC="2", TRAIN_ITERS="4", **layout)
        assert "step 4/4" in out, out[-2000:]
        saved = read_run_config(work / name)
        assert saved.parallel.tensor_model_parallel_size == int(layout.get("TP", 1))
        assert saved.parallel.pipeline_model_parallel_size == int(layout.get("PP", 1))
        assert saved.data.tokenizer == str(work / "tokenizer")


def _run_slurm_example(tmp_path, **env_changes) -> subprocess.CompletedProcess:
    """The sbatch script run with stand-ins for scontrol/srun/torchrun; torchrun writes its args and NCCL env."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {"scontrol": "echo node0; echo node1", "srun": 'shift; "$@"',
                       "torchrun": 'echo "$@" > "$ARGS_OUT"; env | grep ^NCCL_ > "$ARGS_OUT.env" || true'}.items():
        (bin_dir / name).write_text(f"#!/usr/bin/env bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {key: value for key, value in os.environ.items() if not key.startswith("NCCL_")}
    env.update({"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "node[0-1]",
                "SLURM_NNODES": "2", "SLURM_JOB_ID": "7", "SLURM_SUBMIT_DIR": str(EXAMPLES.parent),
                "ARGS_OUT": str(tmp_path / "args"), **env_changes})
    return subprocess.run(["bash", str(EXAMPLES / "slurm.sbatch"), "data", "tok", "save"], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("gres,expected", [("8", "8"), ("h100:8", "8"), ("gpu:h100:4", "4"), (None, "8")])
def test_slurm_example_takes_typed_gres(tmp_path, gres, expected):
    done = _run_slurm_example(tmp_path, **({"SLURM_GPUS_PER_NODE": gres} if gres is not None else {}))
    assert done.returncode == 0, done.stderr
    args = (tmp_path / "args").read_text().split()
    assert args[args.index("--nproc_per_node") + 1] == expected and args[args.index("--nnodes") + 1] == "2"


def test_slurm_example_signals_before_its_shutdown_timeout_and_sets_nccl_logging(tmp_path):
    import re

    text = (EXAMPLES / "slurm.sbatch").read_text()
    lead = int(re.search(r"^#SBATCH --signal=B:TERM@(\d+)$", text, re.M).group(1))
    shutdown = int(re.search(r'TORCH_ELASTIC_SHUTDOWN_TIMEOUT:-(\d+)', text).group(1))
    assert lead > shutdown + 60  # the save's grace ends before SLURM's kill at the limit, with srun's exit after it
    done = _run_slurm_example(tmp_path)
    assert done.returncode == 0 and (tmp_path / "args.env").read_text().split() == ["NCCL_DEBUG=WARN"]
    (tmp_path / "again").mkdir()
    done = _run_slurm_example(tmp_path / "again", NCCL_SOCKET_IFNAME="ib0", NCCL_DEBUG="INFO")
    assert done.returncode == 0 and sorted((tmp_path / "again" / "args.env").read_text().split()) == [
        "NCCL_DEBUG=INFO", "NCCL_SOCKET_IFNAME=ib0"]
