"""megatron-core's fused kernels run eagerly on a CPU-only machine, and its import skips the compiler stack.

megatron-core wraps its fused kernels (bias-GeLU, SwiGLU, the MoE router, ...) in ``torch.compile`` when its
modules are imported. That call alone loads TorchDynamo and Inductor (with sympy, networkx and triton): about 3
of the 8 CPU-seconds that importing megatron-core takes, in every trainer, probe and test process. On a machine
without CUDA this project leaves those fusions off, and where a user turns one on it runs as the same PyTorch
arithmetic, uncompiled.

So while a ``megatron.core`` module is being executed on a CPU-only machine, ``torch.compile`` is the identity,
and the real one is put back as soon as that import returns: every ``torch.compile`` call this project or a user
makes afterwards (FlexAttention on a GPU, a user's own model) is the real one. On a machine with CUDA nothing
changes. The hook is installed when ``megatron_crossbert`` is imported (this module imports neither torch nor
megatron), so it applies to every import of megatron-core that comes after ours.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
import threading

PACKAGE = "megatron.core"
"""The imports this hook makes eager (the package and its submodules)."""

_lock = threading.Lock()
_depth = 0
"""Executions of ``megatron.core`` modules now under way (nested imports, or other threads): the identity stands
in for ``torch.compile`` while this is above 0."""
_real_compile = None
"""The ``torch.compile`` put back when the last of them returns."""


def _eager_compile(model=None, **options):
    """``torch.compile``'s two call forms (``torch.compile(fn)``, ``@torch.compile(...)``), doing nothing."""
    return model if model is not None else (lambda fn: fn)


@functools.cache
def _cpu_only() -> bool:
    import torch

    return not torch.cuda.is_available()


def _swap(entering: bool) -> None:
    """Count one execution in or out; the first in swaps ``torch.compile`` out, the last out puts it back."""
    global _depth, _real_compile
    import torch

    with _lock:
        _depth += 1 if entering else -1
        if entering and _depth == 1:
            _real_compile, torch.compile = torch.compile, _eager_compile
        elif not entering and _depth == 0:
            torch.compile, _real_compile = _real_compile, None


class _EagerExec:
    """A loader's ``exec_module``, run with ``torch.compile`` as the identity."""

    def __init__(self, exec_module) -> None:
        self._exec_module = exec_module

    def __call__(self, module) -> None:
        _swap(entering=True)
        try:
            self._exec_module(module)
        finally:
            _swap(entering=False)


class EagerMegatronFinder(importlib.abc.MetaPathFinder):
    """Finds ``megatron.core`` modules the usual way and wraps their execution in :class:`_EagerExec`."""

    def find_spec(self, fullname, path, target=None):
        if fullname != PACKAGE and not fullname.startswith(PACKAGE + "."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module") or not _cpu_only():
            return spec
        spec.loader.exec_module = _EagerExec(spec.loader.exec_module)
        return spec


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once per process)."""
    if not any(isinstance(finder, EagerMegatronFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, EagerMegatronFinder())
