"""On a CPU-only machine megatron-core's import leaves torch.compile alone afterwards, compiles nothing, and
loads no compiler stack; each check runs in a fresh interpreter, where megatron-core is imported the first time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tests.support import REPO_ROOT

PROBE = """
import json, sys
import megatron_crossbert
import torch
real = torch.compile
import megatron.core
from megatron.core.jit import jit_fuser
from megatron.core.fusions.fused_bias_gelu import bias_gelu_impl
def f(x):
    return x
print(json.dumps({
    "compile_restored": torch.compile is real,
    "fuser_is_identity": jit_fuser(f) is f,
    "compiler_stack": sorted(m for m in ("torch._dynamo", "torch._inductor", "sympy") if m in sys.modules),
    "eager_bias_gelu": type(bias_gelu_impl).__name__,
}))
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="the rule is for CPU-only machines")
def test_megatron_imports_without_the_compiler_and_hands_torch_compile_back():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["compile_restored"] and seen["fuser_is_identity"]
    assert "torch._dynamo" not in seen["compiler_stack"] and "torch._inductor" not in seen["compiler_stack"]


def test_the_identity_takes_both_call_forms_of_torch_compile():
    from megatron_crossbert.platform.eager_fusions import _eager_compile

    def f(x):
        return x

    assert _eager_compile(f) is f and _eager_compile(dynamic=False, fullgraph=True)(f) is f


def test_the_finder_ignores_every_other_package():
    from megatron_crossbert.platform.eager_fusions import EagerMegatronFinder

    finder = EagerMegatronFinder()
    assert finder.find_spec("megatron.corex", None) is None and finder.find_spec("numpy", None) is None
