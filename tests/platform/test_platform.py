"""Canaries for the CPU platform layer: a megatron-core upgrade that moves a patched attribute fails here."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest
import torch

from megatron_crossbert.platform.cpu import PATCHED_ATTRIBUTES, apply_cpu_patches, cpu_patches_active


@pytest.mark.parametrize("module, attribute", PATCHED_ATTRIBUTES)
def test_patched_attribute_still_exists(module, attribute):
    assert hasattr(importlib.import_module(module), attribute), f"{module}.{attribute} moved or vanished"


@pytest.mark.skipif(torch.cuda.is_available(), reason="patches are a no-op with CUDA")
def test_apply_cpu_patches_is_idempotent():
    from megatron.core.tensor_parallel import random as mcore_random

    assert apply_cpu_patches() is True
    tracker_cls, current_device = mcore_random.CudaRNGStatesTracker, torch.cuda.current_device
    assert apply_cpu_patches() is True and cpu_patches_active()
    assert mcore_random.CudaRNGStatesTracker is tracker_cls and torch.cuda.current_device is current_device
    assert torch.cuda.current_device() == "cpu"


_BUILD_BOTH = """
import sys
from megatron_crossbert.platform import distributed as platform
from megatron_crossbert.config import load_run_config
from megatron_crossbert.architectures.build import build_model
small = ["model.vocab_size=200", "model.hidden_size=32", "model.num_layers=1", "model.num_attention_heads=2",
         "model.max_position_embeddings=16", "data.seq_length=16", "model.decoder_num_layers=1"]
for arch in ("crossbert", "bert"):
    cfg = load_run_config(None, small + [f"model.arch={arch}"])
    platform.initialize(cfg.parallel, 0)
    build_model(cfg)
platform.destroy()
print("TE_LOADED" if any(m.startswith("transformer_engine") for m in sys.modules) else "TE_ABSENT")
"""


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="on GPU, TE may legitimately be imported")
def test_building_models_never_imports_transformer_engine():
    """A fresh interpreter, so no other test's imports can hide or fake the result.

    The rendezvous variables are dropped: platform.init_process_group leaves them in os.environ of
    this pytest process, and a child reusing that port can hit EADDRINUSE.
    """
    rendezvous = {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"}
    env = {k: v for k, v in os.environ.items() if k not in rendezvous}
    result = subprocess.run([sys.executable, "-c", _BUILD_BOTH], capture_output=True, text=True, timeout=300,
                            env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("TE_ABSENT")
