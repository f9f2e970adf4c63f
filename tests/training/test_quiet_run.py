"""A run prints no deprecation a user cannot act on: the TransformerConfig arguments are megatron-core's
non-deprecated ones, and megatron's "async save is deprecated" (its synchronous save runs its async writer;
NVRx cannot run on a CPU) is filtered from its logger."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests.support.training import tiny_config, tiny_overrides

REPO = Path(__file__).resolve().parents[2]


def test_building_the_transformer_config_warns_of_nothing_deprecated(indexed_corpus):
    from megatron_crossbert.models.transformer_config import transformer_config

    run_cfg = tiny_config("crossbert", indexed_corpus)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        transformer_config(run_cfg)
        transformer_config(run_cfg, decoder=True)
    assert not [str(w.message) for w in caught if "deprecat" in str(w.message).lower()]


@pytest.mark.e2e
def test_a_tiny_cpu_pretraining_with_a_save_prints_no_deprecation(indexed_corpus, tmp_path):
    """As a user runs it (Python's default warning filters, no --debug): two steps, a save at each."""
    over = tiny_overrides("crossbert", indexed_corpus, tmp_path / "ckpt", training__train_iters=2,
                          checkpoint__save_interval=1)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONWARNINGS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-m", "megatron_crossbert.cli.pretrain",
                           *[arg for value in over for arg in ("--set", value)]],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert (tmp_path / "ckpt" / "iter_0000002").is_dir(), output[-3000:]
    said = [line for line in output.splitlines() if "deprecat" in line.lower()]
    assert not said, said
