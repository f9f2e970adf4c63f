"""Run megatron-core on a CPU-only machine with gloo.

megatron-core 0.19 assumes CUDA in a handful of places (see ``PATCHED_ATTRIBUTES``). On a machine
without CUDA we redirect each of them to the CPU, once, in this module and nowhere else. On a GPU
machine ``apply_cpu_patches`` does nothing. Canary tests assert that every patched attribute still
exists, so a megatron-core upgrade that moves one fails loudly instead of silently un-patching.
"""

from __future__ import annotations

import contextlib
import threading

import torch
from torch.overrides import TorchFunctionMode

# (module path, attribute) pairs that apply_cpu_patches replaces. Kept as data for the canary test.
PATCHED_ATTRIBUTES: tuple[tuple[str, str], ...] = (
    ("torch.cuda", "current_device"),
    ("torch.cuda", "synchronize"),
    ("torch.cuda", "current_stream"),
    ("torch.cuda", "default_stream"),
    ("torch.cuda", "manual_seed"),
    ("torch.cuda", "manual_seed_all"),
    ("megatron.core.tensor_parallel.random", "CudaRNGStatesTracker"),
    ("megatron.core.tensor_parallel.random", "_CUDA_RNG_STATE_TRACKER"),
    ("megatron.core.tensor_parallel.random", "_CUDA_RNG_STATE_TRACKER_INITIALIZED"),
    ("megatron.core.tensor_parallel.random", "_get_cuda_rng_state"),
    ("megatron.core.tensor_parallel.random", "_set_cuda_rng_state"),
    ("megatron.core.transformer.utils", "get_default_causal_mask"),
    ("megatron.core.fusions.fused_softmax", "get_default_causal_mask"),
)

_lock = threading.Lock()
_applied = False
_mode: TorchFunctionMode | None = None


class CpuRNGStatesTracker:
    """Stand-in for megatron's CudaRNGStatesTracker that forks the CPU generator instead.

    Model-parallel dropout and TP-sharded init draw from named RNG streams; on CPU those streams
    are snapshots of the CPU generator state, swapped in and out by ``fork``.
    """

    def __init__(self, *args, **kwargs) -> None:
        self.reset()

    def reset(self) -> None:
        self.states_: dict[str, torch.Tensor] = {}
        self.seeds_: set[int] = set()

    def is_initialized(self) -> bool:
        return True

    def get_states(self) -> dict[str, torch.Tensor]:
        return {name: state.clone() for name, state in self.states_.items()}

    def set_states(self, states: dict[str, torch.Tensor]) -> None:
        self.states_ = {name: state.clone() for name, state in states.items()}

    def add(self, name: str, seed: int) -> None:
        if seed in self.seeds_:
            raise RuntimeError(f"seed {seed} already exists")
        if name in self.states_:
            raise RuntimeError(f"rng state {name} already exists")
        self.seeds_.add(seed)
        saved = torch.get_rng_state()
        torch.manual_seed(seed)
        self.states_[name] = torch.get_rng_state()
        torch.set_rng_state(saved)

    @contextlib.contextmanager
    def fork(self, name: str = "model-parallel-rng"):
        if name not in self.states_:
            raise RuntimeError(f"rng state {name} is not added")
        saved = torch.get_rng_state()
        torch.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(saved)


class _NullStream:
    """What megatron gets for torch.cuda.current_stream(): every stream operation is a no-op."""

    def wait_event(self, *args, **kwargs) -> None:
        pass

    def wait_stream(self, *args, **kwargs) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def record_event(self, *args, **kwargs) -> None:
        return None


def _is_cuda_device(device) -> bool:
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, torch.device) and device.type == "cuda"


class CudaToCpuMode(TorchFunctionMode):
    """Maps hard-coded ``device='cuda'`` / ``.cuda()`` in megatron-core to the CPU.

    Also reports ``torch.cuda.FloatTensor``-style type names, because megatron's optimizer asserts
    parameter types by string.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if _is_cuda_device(kwargs.get("device")):
            kwargs["device"] = "cpu"
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            name = func(*args)
            return name if name.startswith("torch.cuda.") else name.replace("torch.", "torch.cuda.", 1)
        if func is torch.Tensor.to and len(args) > 1 and _is_cuda_device(args[1]):
            args = (args[0], "cpu", *args[2:])
        return func(*args, **kwargs)


def _default_causal_mask(sq: int) -> torch.Tensor:
    return torch.triu(torch.ones(sq, sq), diagonal=1).bool()


def _patch_rng() -> None:
    from megatron.core.tensor_parallel import random as mcore_random

    mcore_random.CudaRNGStatesTracker = CpuRNGStatesTracker
    mcore_random._CUDA_RNG_STATE_TRACKER = None
    mcore_random._CUDA_RNG_STATE_TRACKER_INITIALIZED = False
    mcore_random._get_cuda_rng_state = lambda *args, **kwargs: torch.get_rng_state()
    mcore_random._set_cuda_rng_state = lambda state, *args, **kwargs: torch.set_rng_state(state)
    torch.cuda.manual_seed = lambda seed: None
    torch.cuda.manual_seed_all = lambda seed: None


def _patch_devices_and_streams() -> None:
    import megatron.core.fusions.fused_softmax as fused_softmax
    import megatron.core.transformer.utils as transformer_utils

    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.cuda.current_stream = lambda *args, **kwargs: _NullStream()
    torch.cuda.default_stream = lambda *args, **kwargs: _NullStream()
    transformer_utils.get_default_causal_mask = _default_causal_mask
    fused_softmax.get_default_causal_mask = _default_causal_mask


def apply_cpu_patches() -> bool:
    """Patch megatron-core/torch for CPU execution when CUDA is absent. Idempotent.

    Must run before ``model_parallel_cuda_manual_seed`` (it installs the CPU RNG tracker). Returns
    True when the patches are (or already were) active, False on a CUDA machine.
    """
    global _applied, _mode
    if torch.cuda.is_available():
        return False
    with _lock:
        if _applied:
            return True
        _patch_rng()
        _patch_devices_and_streams()
        _mode = CudaToCpuMode()
        _mode.__enter__()
        _applied = True
    return True


def cpu_patches_active() -> bool:
    return _applied
