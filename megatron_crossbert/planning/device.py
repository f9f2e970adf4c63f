"""What the planner needs to know about the hardware: named GPUs, this CPU, the cluster, and the runtime's byte sizes.

GPU figures are the vendors' datasheet numbers (dense bf16 Tensor-Core TFLOP/s, memory as CUDA reports it,
NVLink and per-GPU network bandwidth); ``Runtime`` turns a run config plus "CUDA or CPU" into the byte sizes
the activation model counts with (``planning.activations``).

The CPU target (``cpu``) is this machine, so a plan can be checked where it is made. What autograd saves
differs from a GPU's in two terms (``Runtime``): a dropout mask is a float of the activation dtype, not a
bool; and attention dropout sends SDPA to its unfused math kernel, which keeps the attention probabilities
(and their mask and the dropped copy) where CUDA's fused kernels keep none. Everything else is the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from megatron_crossbert.config import RunConfig

GIB = 1024 ** 3


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model's datasheet figures."""

    name: str
    memory_gib: float
    """Device memory as ``torch.cuda.get_device_properties().total_memory`` reports it."""
    peak_tflops: float
    """Dense bf16 Tensor-Core peak (no sparsity)."""
    nvlink_gb_s: float
    """Intra-node all-reduce bus bandwidth per GPU (GB/s)."""
    network_gb_s: float
    """Inter-node bandwidth per GPU (GB/s; one 400 Gb/s NIC per GPU = 50)."""
    cuda: bool = True
    """False for the CPU target: activations take the CPU's byte sizes and kernels (``runtime``)."""


GPUS: dict[str, GpuSpec] = {gpu.name: gpu for gpu in (
    GpuSpec("h100", memory_gib=79.1, peak_tflops=989.4, nvlink_gb_s=450.0, network_gb_s=50.0),
    GpuSpec("h200", memory_gib=139.8, peak_tflops=989.4, nvlink_gb_s=450.0, network_gb_s=50.0),
    GpuSpec("a100", memory_gib=79.1, peak_tflops=312.0, nvlink_gb_s=300.0, network_gb_s=25.0),
    GpuSpec("l40s", memory_gib=44.4, peak_tflops=362.0, nvlink_gb_s=32.0, network_gb_s=12.5),
)}
CPU = "cpu"
"""``--gpu cpu``: this machine (``this_cpu``)."""
CPU_CORE_TFLOPS = 0.1
"""Nominal fp32 peak of one core: two 8-wide AVX2 FMA units (32 FLOP per cycle) at about 3 GHz."""


def this_cpu() -> GpuSpec:
    """This machine as one rank: its RAM and its cores at ``CPU_CORE_TFLOPS`` (gloo over shared memory
    within the node, 10 GbE across nodes)."""
    import os

    ram_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return GpuSpec(CPU, memory_gib=ram_gib, peak_tflops=cores * CPU_CORE_TFLOPS, nvlink_gb_s=10.0,
                   network_gb_s=1.25, cuda=False)


def device_spec(name: str) -> GpuSpec:
    """A named GPU of ``GPUS``, or this CPU."""
    return this_cpu() if name == CPU else GPUS[name]


@dataclass(frozen=True)
class Cluster:
    """The machines a plan is for."""

    gpu: GpuSpec
    """Every GPU of the cluster is this one."""
    gpus_per_node: int = 8
    """Tensor parallelism stays inside a node (NVLink)."""
    nodes: int = 1
    """Nodes; data parallelism across them goes over the network."""

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.nodes


@dataclass(frozen=True)
class Runtime:
    """Byte sizes and kernels of the device the activations live on."""

    element_bytes: int
    """Activation dtype: 2 under bf16/fp8, 4 in fp32."""
    dropout_mask_bytes: int
    """A dropout mask element: CUDA keeps a bool, the CPU a float of the activation dtype."""
    math_attention: bool
    """SDPA runs its unfused math kernel: on the CPU with attention dropout (the CPU's fused kernel has no
    dropout). It keeps fp32 scaled copies of Q and K and three fp32 ``[b, heads, q, k]`` tensors (the
    probabilities, their dropout mask, the dropped probabilities), and no log-sum-exp or dense mask. CUDA's
    fused kernels replay dropout from an RNG seed and keep nothing per score."""
    attention_backend: str
    """sdpa, flex or megatron, as ``core_attention.resolve_backend`` decides it on this device."""
    masked: bool
    """Document masks or windows apply, so attention gets a mask."""
    hidden_dropout: bool
    """Residual dropout is on, so each residual keeps a mask."""
    attention_dropout: bool
    """Attention dropout is on (megatron's unfused attention then keeps a mask of the scores; SDPA does on the
    CPU only, ``math_attention``)."""


def runtime(run_cfg: RunConfig, cuda: bool = True) -> Runtime:
    """The runtime ``run_cfg`` trains with on a GPU (``cuda``) or on this CPU."""
    from megatron_crossbert.models.core_attention import resolve_backend

    model = run_cfg.model
    masked = run_cfg.data.document_mask or model.windowed
    backend, _ = resolve_backend(model.attention_backend, cuda=cuda, masked=masked,
                                 attention_dropout=model.attention_dropout, training=True)
    element = 2 if run_cfg.training.half_precision else 4
    return Runtime(element_bytes=element, dropout_mask_bytes=1 if cuda else element, attention_backend=backend,
                   math_attention=not cuda and backend == "sdpa" and model.attention_dropout > 0,
                   masked=masked, hidden_dropout=model.hidden_dropout > 0,
                   attention_dropout=model.attention_dropout > 0)
