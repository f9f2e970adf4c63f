"""Shared fixtures: deterministic seeds, clean process groups, free ports, multi-rank spawning."""

from __future__ import annotations

import os
import random
import sys

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(autouse=True)
def _reset_seeds_and_groups():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    yield
    if "megatron.core" in sys.modules:  # pure-function tests never pay for importing megatron
        from megatron_crossbert.platform import destroy

        destroy()


@pytest.fixture
def free_port() -> int:
    from megatron_crossbert.platform import free_port as _free_port

    return _free_port()
