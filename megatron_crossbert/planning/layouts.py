"""Layouts (TP, PP, DP, micro-batch, recompute) of one run on one cluster: memory, time, and why some cannot run.

Memory per GPU of pipeline stage ``i``: its weights, gradient buffer and optimizer states
(``parameters.state_bytes``), plus the activations of the micro-batches the 1F1B schedule keeps in flight there
(``min(PP - i, micro-batches)``), plus what backward adds on top (the logits' gradient on the last stage; one
rebuilt layer under recompute). A layout fits when that stays under ``USABLE_FRACTION`` of the GPU's memory.

Time per step: the model FLOPs of ``models.flops`` (one more forward under full recompute) at an assumed MFU
of the GPU's peak, stretched by the pipeline bubble ``(PP - 1) / micro-batches``, plus the tensor-parallel
collectives (4 per layer and micro-batch, 6 with recompute, over NVLink) and the data-parallel gradient
all-reduce (reduce-scatter + all-gather under the distributed optimizer) when it is not overlapped, over
NVLink inside a node and the network across nodes. Pipeline send/receive is ignored (one activation per
micro-batch and stage). Every assumption is a named constant or an argument, and the report prints them.
"""

from __future__ import annotations

from dataclasses import dataclass

from megatron_crossbert.arch import get_arch
from megatron_crossbert.config import RunConfig, replace_sections
from megatron_crossbert.models.flops import model_flops_per_sample
from megatron_crossbert.planning.activations import MicroBatchActivations, encoder_block, micro_batch_activations
from megatron_crossbert.planning.device import Cluster, runtime
from megatron_crossbert.planning.parameters import StateBytes, state_bytes

USABLE_FRACTION = 0.92
"""Share of device memory a plan may fill: the CUDA context, cuBLAS workspaces and allocator fragmentation
take the rest (``torch.cuda.max_memory_allocated`` does not see the context)."""
ASSUMED_MFU = 0.40
"""Model FLOPs utilisation assumed when none was measured (bf16 BERT-sized dense layers on Hopper)."""
RECOMPUTE_FLOPS = 4.0 / 3.0
"""Full recompute runs every layer's forward twice: 4 passes of work for 3 of model FLOPs."""
LAYER_OVERHEAD_SECONDS = 2e-4
"""Fixed cost of one layer's forward and backward per micro-batch (some 20 kernel launches, Python, norms):
what makes small micro-batches slower at equal FLOPs."""


@dataclass(frozen=True)
class Layout:
    """One way to run the job."""

    tp: int
    """Tensor-parallel size (with sequence parallelism when > 1)."""
    pp: int
    """Pipeline stages (1F1B schedule)."""
    dp: int
    """Data-parallel size: the rest of the world."""
    micro_batch_size: int
    """Sequences per micro-batch per DP rank."""
    recompute: bool
    """Full activation recompute, one layer at a time."""

    def describe(self) -> str:
        return (f"TP{self.tp} PP{self.pp} DP{self.dp} mbs {self.micro_batch_size}"
                + (" recompute" if self.recompute else ""))


@dataclass
class LayoutPlan:
    """A layout priced: memory per stage, time per step."""

    layout: Layout
    run_cfg: RunConfig
    """The config under this layout."""
    states: list[StateBytes]
    """Per pipeline stage (the DP rank holding the most optimizer state)."""
    activations: MicroBatchActivations
    stage_activation_bytes: list[int]
    """Per stage: its in-flight micro-batches' activations plus backward's extra."""
    num_microbatches: int
    """Micro-batches per step on each DP rank."""
    step_seconds: float
    """Predicted seconds per optimizer step."""
    tokens_per_second: float
    """Input tokens (L per sample) per second over the whole cluster."""
    mfu: float
    """Model FLOPs over (step time x GPUs x peak): the assumed MFU less overheads."""
    fits: bool
    """The peak stays under ``USABLE_FRACTION`` of device memory on every stage."""

    @property
    def stage_peak_bytes(self) -> list[int]:
        return [s.total + a for s, a in zip(self.states, self.stage_activation_bytes)]

    @property
    def peak_bytes(self) -> int:
        return max(self.stage_peak_bytes)


@dataclass
class Refusal:
    """A layout that cannot run, and why (one line)."""

    layout: Layout
    reason: str
    """Why, in one line."""


@dataclass
class Planner:
    """Prices layouts of ``run_cfg`` on ``cluster``."""

    run_cfg: RunConfig
    """The run as configured (its layout is one candidate)."""
    cluster: Cluster
    mfu: float = ASSUMED_MFU
    """Model FLOPs utilisation the step time assumes."""
    distributed_optimizer: bool | None = None
    """None: as the config says."""

    def configure(self, layout: Layout) -> RunConfig:
        """The run config under ``layout`` (sequence parallelism whenever TP > 1). A micro-batch that does not
        divide the global batch (the largest-micro-batch search) runs with the nearest multiple of it."""
        gbs, mbs = self.run_cfg.training.global_batch_size, layout.micro_batch_size
        dist = self.run_cfg.parallel.use_distributed_optimizer if self.distributed_optimizer is None \
            else self.distributed_optimizer
        return replace_sections(self.run_cfg, {
            "parallel.tensor_model_parallel_size": layout.tp, "parallel.pipeline_model_parallel_size": layout.pp,
            "parallel.sequence_parallel": layout.tp > 1, "parallel.recompute_activations": layout.recompute,
            "parallel.use_distributed_optimizer": dist and layout.dp > 1,
            "training.micro_batch_size": mbs, "training.global_batch_size": mbs * max(1, round(gbs / mbs))})

    def why_not(self, layout: Layout) -> str | None:
        """The structural reason ``layout`` cannot run, or None."""
        model, gbs = self.run_cfg.model, self.run_cfg.training.global_batch_size
        world = self.cluster.world_size
        if layout.tp * layout.pp * layout.dp != world:
            return f"TP x PP = {layout.tp * layout.pp} does not divide the {world} GPUs"
        for name, heads in (("encoder", model.num_attention_heads), ("decoder", model.dec_heads)):
            if heads % layout.tp and (name == "encoder" or get_arch(model.arch).has_reconstruction_decoder):
                return f"TP {layout.tp} does not divide the {name}'s {heads} attention heads"
        if model.make_vocab_size_divisible_by % layout.tp:
            return f"TP {layout.tp} does not divide make_vocab_size_divisible_by={model.make_vocab_size_divisible_by}"
        if layout.tp > self.cluster.gpus_per_node:
            return f"TP {layout.tp} would span nodes ({self.cluster.gpus_per_node} GPUs per node)"
        if model.num_layers % layout.pp:
            return f"PP {layout.pp} does not divide the {model.num_layers} encoder layers"
        if gbs % (layout.micro_batch_size * layout.dp):
            return f"global batch {gbs} is not a multiple of micro-batch x DP = {layout.micro_batch_size * layout.dp}"
        return None

    def price(self, layout: Layout) -> LayoutPlan:
        """Memory and time of a layout that passed ``why_not``."""
        cfg = self.configure(layout)
        microbatches = max(1, cfg.training.global_batch_size // (layout.micro_batch_size * layout.dp))
        acts = micro_batch_activations(cfg, runtime(cfg, cuda=self.cluster.gpu.cuda))
        layers = cfg.model.num_layers // layout.pp
        states = [state_bytes(cfg, stage, layout.dp) for stage in range(layout.pp)]
        stage_acts = [min(layout.pp - stage, microbatches) * acts.stage_bytes(stage, layout.pp, layers)
                      + acts.recompute_peak_bytes + (acts.logits_bytes if stage == layout.pp - 1 else 0)
                      for stage in range(layout.pp)]
        seconds = self.step_seconds(cfg, layout, microbatches, states)
        tokens = cfg.training.global_batch_size * cfg.data.seq_length / seconds
        flops = model_flops_per_sample(cfg) * cfg.training.global_batch_size
        mfu = flops / (seconds * self.cluster.world_size * self.cluster.gpu.peak_tflops * 1e12)
        plan = LayoutPlan(layout, cfg, states, acts, stage_acts, microbatches, seconds, tokens, mfu, fits=True)
        plan.fits = plan.peak_bytes <= USABLE_FRACTION * self.cluster.gpu.memory_gib * 2 ** 30
        return plan

    def step_seconds(self, cfg: RunConfig, layout: Layout, microbatches: int, states: list[StateBytes]) -> float:
        """Compute at the assumed MFU plus each micro-batch's fixed per-layer cost, stretched by the bubble,
        plus exposed TP and DP communication."""
        gpu = self.cluster.gpu
        flops = model_flops_per_sample(cfg) * cfg.training.global_batch_size
        compute = flops * (RECOMPUTE_FLOPS if layout.recompute else 1.0) / (
            self.cluster.world_size * gpu.peak_tflops * 1e12 * self.mfu)
        layers = cfg.model.num_layers // layout.pp + cfg.model.decoder_num_layers
        compute += microbatches * layers * LAYER_OVERHEAD_SECONDS * (1.5 if layout.recompute else 1.0)
        compute *= 1 + (layout.pp - 1) / microbatches
        return compute + self._tp_seconds(cfg, layout, microbatches) + self._dp_seconds(cfg, layout, states)

    def _tp_seconds(self, cfg: RunConfig, layout: Layout, microbatches: int) -> float:
        if layout.tp == 1:
            return 0.0
        enc = encoder_block(cfg)
        element = 2 if cfg.training.half_precision else 4
        layers = cfg.model.num_layers // layout.pp + (cfg.model.decoder_num_layers if layout.pp == 1 else 0)
        per_collective = enc.rows * enc.width * element * 2 * (layout.tp - 1) / layout.tp
        collectives = (6 if layout.recompute else 4) * layers * microbatches
        return collectives * per_collective / (self.cluster.gpu.nvlink_gb_s * 1e9)

    def _dp_seconds(self, cfg: RunConfig, layout: Layout, states: list[StateBytes]) -> float:
        if layout.dp == 1 or cfg.parallel.overlap_grad_reduce:
            return 0.0
        inside = layout.tp * layout.pp * layout.dp <= self.cluster.gpus_per_node
        bandwidth = (self.cluster.gpu.nvlink_gb_s if inside else self.cluster.gpu.network_gb_s) * 1e9
        grads = max(s.gradients for s in states)
        volume = 2 * grads * (layout.dp - 1) / layout.dp  # all-reduce, or reduce-scatter + all-gather
        return volume / bandwidth


def _powers_of_two(limit: int) -> list[int]:
    return [1 << i for i in range(limit.bit_length()) if (1 << i) <= limit]


def candidate_layouts(planner: Planner) -> list[Layout]:
    """TP and PP powers of two (TP within a node), DP the rest of the world, micro-batches dividing the
    per-DP-rank batch, recompute off and on."""
    world, gbs = planner.cluster.world_size, planner.run_cfg.training.global_batch_size
    layouts = []
    for tp in _powers_of_two(min(world, 2 * planner.cluster.gpus_per_node)):
        for pp in (p for p in _powers_of_two(world // tp) if p <= planner.run_cfg.model.num_layers):
            dp = world // (tp * pp)
            for mbs in (m for m in _powers_of_two(max(1, gbs // dp))):
                layouts.extend(Layout(tp, pp, dp, mbs, recompute) for recompute in (False, True))
    return layouts


def rank_layouts(planner: Planner) -> tuple[list[LayoutPlan], list[Refusal]]:
    """Every layout that fits, fastest first, and one refusal per (TP, PP, recompute) that cannot run at all
    or per micro-batch that does not fit."""
    fitting, refusals, refused_shapes = [], [], set()
    for layout in candidate_layouts(planner):
        reason = planner.why_not(layout)
        shape = (layout.tp, layout.pp, reason if reason and "global batch" not in reason else None)
        if reason:
            if shape not in refused_shapes or "global batch" in reason:
                refusals.append(Refusal(layout, reason))
                refused_shapes.add(shape)
            continue
        plan = planner.price(layout)
        if plan.fits:
            fitting.append(plan)
        else:
            refusals.append(Refusal(layout, f"does not fit: {plan.peak_bytes / 2 ** 30:.1f} GiB > "
                                            f"{USABLE_FRACTION:.0%} of {planner.cluster.gpu.memory_gib:.0f} GiB"))
    fitting.sort(key=lambda p: (-p.tokens_per_second, p.peak_bytes))
    return fitting, refusals


def largest_micro_batch(planner: Planner, tp: int, pp: int, recompute: bool, limit: int = 4096) -> int:
    """The largest micro-batch (any integer, the global batch's divisibility aside) that fits at TP, PP; 0 if none."""
    dp = planner.cluster.world_size // (tp * pp)

    def fits(mbs: int) -> bool:
        return planner.price(Layout(tp, pp, dp, mbs, recompute)).fits

    low, high = 0, 1
    while high <= limit and fits(high):
        low, high = high, high * 2
    high = min(high, limit + 1)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low
