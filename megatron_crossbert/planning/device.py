"""What the planner needs to know about the hardware: named GPUs, the cluster, and the runtime's byte sizes.

GPU figures are the vendors' datasheet numbers (dense bf16 Tensor-Core TFLOP/s, memory as CUDA reports it,
NVLink and per-GPU network bandwidth); ``Runtime`` turns a run config plus "CUDA or CPU" into the byte sizes
the activation model counts with (``planning.activations``).
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


GPUS: dict[str, GpuSpec] = {gpu.name: gpu for gpu in (
    GpuSpec("h100", memory_gib=79.1, peak_tflops=989.4, nvlink_gb_s=450.0, network_gb_s=50.0),
    GpuSpec("h200", memory_gib=139.8, peak_tflops=989.4, nvlink_gb_s=450.0, network_gb_s=50.0),
    GpuSpec("a100", memory_gib=79.1, peak_tflops=312.0, nvlink_gb_s=300.0, network_gb_s=25.0),
    GpuSpec("l40s", memory_gib=44.4, peak_tflops=362.0, nvlink_gb_s=32.0, network_gb_s=12.5),
)}


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
    attention_backend: str
    """sdpa, flex or megatron, as ``core_attention.resolve_backend`` decides it on this device."""
    masked: bool
    """Document masks or windows apply, so attention gets a mask."""
    hidden_dropout: bool
    """Residual dropout is on, so each residual keeps a mask."""
    attention_dropout: bool
    """Attention dropout is on (only megatron's unfused attention then keeps a mask of the scores)."""


def runtime(run_cfg: RunConfig, cuda: bool = True) -> Runtime:
    """The runtime ``run_cfg`` trains with on a GPU (``cuda``) or on this CPU."""
    from megatron_crossbert.models.core_attention import resolve_backend

    model = run_cfg.model
    masked = run_cfg.data.document_mask or model.windowed
    backend, _ = resolve_backend(model.attention_backend, cuda=cuda, masked=masked,
                                 attention_dropout=model.attention_dropout, training=True)
    element = 2 if run_cfg.training.half_precision else 4
    return Runtime(element_bytes=element, dropout_mask_bytes=1 if cuda else element, attention_backend=backend,
                   masked=masked, hidden_dropout=model.hidden_dropout > 0,
                   attention_dropout=model.attention_dropout > 0)


def measured_mfu(path: str, run_cfg: RunConfig, gpu: GpuSpec) -> tuple[float, str]:
    """(MFU against ``gpu``'s peak, where it comes from) from a device check's or ``crossbert-bench gpu-check``'s
    JSON: the bf16 rows of this run's architecture and family at the measured shape nearest its width, their
    mean achieved TFLOP/s over the peak. ValueError naming the file when it holds no such row."""
    import json
    from pathlib import Path

    from megatron_crossbert.benchmarking.cases import SIZES

    payload = json.loads(Path(path).read_text())
    payload = payload.get("stages", {}).get("gpu_check", {}).get("result", payload)
    model = run_cfg.model
    runs = [run for run in payload.get("runs", []) if "report" in run and run.get("precision") == "bf16"
            and run.get("size") in SIZES]
    this_run = (model.arch, model.encoder)  # the rows measured with this run's architecture and family
    rows_by_size = {run["size"]: [r["achieved_tflops"] for r in run["report"]["results"]
                                  if (r.get("arch"), r.get("encoder")) == this_run and r.get("achieved_tflops")]
                    for run in runs}
    rows_by_size = {size: rows for size, rows in rows_by_size.items() if rows}
    if not rows_by_size:
        raise ValueError(f"{path}: no bf16 gpu-check measurement of arch={model.arch} encoder={model.encoder}")
    size = min(rows_by_size, key=lambda name: abs(SIZES[name]["hidden_size"] - model.hidden_size))
    achieved = sum(rows_by_size[size]) / len(rows_by_size[size])
    return achieved / gpu.peak_tflops, f"measured: gpu-check {size}, {achieved:.0f} TFLOP/s, in {path}"
