"""fp8 and Transformer Engine layers are refused in one line where they would be a silent no-op.

megatron-core's FP8 context is a no-op without TE, so unguarded ``--precision fp8`` on a CPU
trains in bf16 with exit status 0 while run_config.json said fp8 (the CLI rows are in
``cli/test_error_lines.py``).
"""

from __future__ import annotations

import pytest
import torch

from megatron_crossbert.models import specs
from megatron_crossbert.models.specs import UnsupportedSettingError, require_support, support_problems

cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour")


@cpu_only
def test_fp8_on_cpu_is_refused_in_one_line():
    with pytest.raises(UnsupportedSettingError) as info:
        require_support("fp8", "auto")
    assert str(info.value).startswith("training.precision=fp8 needs CUDA and an importable Transformer Engine, "
                                      "but no CUDA device is available")
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)


@cpu_only
def test_te_layers_on_cpu_are_a_value_error_not_a_runtime_error():
    with pytest.raises(ValueError, match="model.transformer_impl=transformer_engine needs CUDA"):
        require_support("fp32", "transformer_engine")


def test_plain_settings_pass():
    assert all(support_problems(p, impl) == [] for p in ("fp32", "bf16") for impl in ("auto", "local"))


def test_fp8_with_local_layers_is_refused_even_with_te(monkeypatch):
    monkeypatch.setattr(specs, "transformer_engine_problem", lambda: None)
    monkeypatch.setattr(specs, "_fp8_device_problem", lambda: None)
    assert support_problems("fp8", "auto") == []
    assert "silently train in bf16" in support_problems("fp8", "local")[0]


def test_fp8_on_a_gpu_without_fp8_cores(monkeypatch):
    monkeypatch.setattr(specs, "transformer_engine_problem", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA A100")
    assert support_problems("fp8", "transformer_engine") == [
        "training.precision=fp8: NVIDIA A100 (compute capability 8.0) has no FP8 tensor cores (needs 8.9+)"]


def test_a_broken_te_install_is_named(monkeypatch):
    """A half-installed TE raises more than ImportError on import; the reason is kept, on one line."""
    import builtins

    real_import = builtins.__import__

    def broken(name, *args, **kwargs):
        if name == "transformer_engine":
            raise OSError("libtransformer_engine.so: cannot open shared object file\nmore")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(builtins, "__import__", broken)
    assert specs.transformer_engine_problem() == ("transformer_engine does not import (OSError: "
                                                  "libtransformer_engine.so: cannot open shared object file)")
