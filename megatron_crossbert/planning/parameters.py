"""Exact parameter counts per rank, and the bytes the weights, gradients and Adam states take.

Why a formula and not a model on the ``meta`` device: a TP=8, PP=4 layout cannot be built on one CPU
process, and the planner must price hundreds of layouts. The tests check every count against the built
model (one rank) and against two gloo ranks at TP=2 and under the distributed optimizer.

Sharding follows megatron-core: column-parallel weights and biases (QKV, Q, KV, FC1, the vocab rows) are
split over TP; row-parallel weights (attention output, FC2) too, their biases not; LayerNorms, the
learned position tables, the LM head's dense and CrossBERT's query embeddings are replicated. The
encoder layers are split evenly over PP; the embeddings live on the first stage, the final norm, the
decoder and the heads on the last, which under PP > 1 also holds its own copy of the tied word
embeddings (megatron's ``shared_embedding_or_output_weight``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from megatron_crossbert.arch import get_arch, get_encoder
from megatron_crossbert.config import RunConfig


Tensor = tuple[int, bool]
"""One parameter tensor: (elements, whether tensor parallelism splits it)."""


@dataclass(frozen=True)
class ParamGroup:
    """The parameter tensors of one part of the model, and where in the pipeline they live."""

    name: str
    tensors: tuple[Tensor, ...]
    """Each tensor of the part, once per layer for repeated layers."""
    where: str
    """'first' (first pipeline stage), 'layer' (one encoder layer, on the stage that builds it) or 'last'."""
    layer: int = 0
    """The encoder layer's index (for ``where='layer'``)."""

    def per_rank(self, tp: int) -> int:
        return sum(numel // tp if sharded else numel for numel, sharded in self.tensors)


def _norm(width: int) -> list[Tensor]:
    return [(width, False), (width, False)]  # LayerNorm weight and bias


def _linear(fan_in: int, fan_out: int, bias: bool, column: bool) -> list[Tensor]:
    """A TP-split linear: column-parallel splits its bias too, row-parallel keeps it whole."""
    return [(fan_in * fan_out, True)] + ([(fan_out, column)] if bias else [])


def attention_tensors(width: int, bias: bool, memory_width: int | None = None) -> list[Tensor]:
    """Self-attention (fused QKV) or, with ``memory_width``, cross-attention (Q, and K/V read from the memory)."""
    if memory_width is None:
        inputs = _linear(width, 3 * width, bias, column=True)
    else:
        inputs = _linear(width, width, bias, column=True) + _linear(memory_width, 2 * width, bias, column=True)
    return inputs + _linear(width, width, bias, column=False)


def mlp_tensors(width: int, ffn: int, bias: bool, gated: bool) -> list[Tensor]:
    """FC1 (2*ffn wide when gated: GeGLU) and FC2."""
    return _linear(width, ffn * (2 if gated else 1), bias, column=True) + _linear(ffn, width, bias, column=False)


def layer_tensors(width: int, ffn: int, bias: bool, gated: bool, *, attention_norm: bool = True,
                  memory_width: int | None = None) -> list[Tensor]:
    """One transformer layer; ``memory_width`` adds a cross-attention block (CrossBERT's decoder)."""
    tensors = (_norm(width) if attention_norm else []) + attention_tensors(width, bias)
    if memory_width is not None:
        tensors += _norm(width) + attention_tensors(width, bias, memory_width)
    return tensors + _norm(width) + mlp_tensors(width, ffn, bias, gated)


def param_groups(run_cfg: RunConfig) -> list[ParamGroup]:
    """Every parameter tensor of the model; the per-rank and per-stage sums are the planner's counts."""
    model = run_cfg.model
    family, spec = get_encoder(model.encoder), get_arch(model.arch)
    vocab = model.padded_vocab_size(run_cfg.parallel.tensor_model_parallel_size)
    h, bias, gated = model.hidden_size, family.linear_bias, family.gated_mlp
    embedding = [(vocab * h, True)] + ([(model.max_position_embeddings * h, False)] if family.learned_positions
                                       else _norm(h))
    layers = [ParamGroup(f"encoder layer {index}", tuple(layer_tensors(
        h, model.ffn, bias, gated, attention_norm=index > 0 or not family.embedding_norm)), "layer", index)
        for index in range(model.num_layers)]  # the modern layer 0 reads normed embeddings: no attention norm
    groups = [ParamGroup("embeddings", tuple(embedding), "first"), *layers,
              ParamGroup("encoder final norm", tuple(_norm(h)), "last")]
    if spec.has_reconstruction_decoder:
        groups.append(_decoder_group(run_cfg))
    head_in = model.dec_hidden if spec.has_reconstruction_decoder else h
    head_bias = bias or spec.has_reconstruction_decoder  # CrossBERT's head keeps BERT's dense bias
    head = [(head_in * h, False)] + ([(h, False)] if head_bias else []) + _norm(h) + [(vocab, True)]
    groups.append(ParamGroup("LM head", tuple(head), "last"))
    if run_cfg.parallel.pipeline_model_parallel_size > 1:
        groups.append(ParamGroup("tied output weight copy", ((vocab * h, True),), "last"))
    return groups


def _decoder_group(run_cfg: RunConfig) -> ParamGroup:
    """CrossBERT's reconstruction branch: queries, decoder layers (self + cross-attention) and its final norm."""
    model = run_cfg.model
    family = get_encoder(model.encoder)
    d = model.dec_hidden
    queries = [(d, False)] + ([(model.max_position_embeddings * d, False)] if model.decoder_position_embedding
                              else [])
    if model.decoder_context_position_embedding:  # at the encoder's width, added to what cross-attention reads
        queries.append((model.max_position_embeddings * model.hidden_size, False))
    layer = layer_tensors(d, model.dec_ffn, family.linear_bias, family.gated_mlp, memory_width=model.hidden_size)
    return ParamGroup("decoder", tuple(queries + layer * model.decoder_num_layers + _norm(d)), "last")


def total_params(run_cfg: RunConfig) -> int:
    """All parameters of the model at TP=PP=1 (the tied output weight counted once)."""
    one = RunConfig.from_dict({**run_cfg.to_dict(), "parallel": {}}) if _parallel(run_cfg) else run_cfg
    return sum(group.per_rank(1) for group in param_groups(one))


def _parallel(run_cfg: RunConfig) -> bool:
    return run_cfg.parallel.tensor_model_parallel_size > 1 or run_cfg.parallel.pipeline_model_parallel_size > 1


def on_stage(run_cfg: RunConfig, group: ParamGroup, stage: int) -> bool:
    """Whether pipeline stage ``stage`` holds ``group`` (encoder layers split evenly, in order)."""
    pp = run_cfg.parallel.pipeline_model_parallel_size
    if group.where == "layer":
        return group.layer // (run_cfg.model.num_layers // pp) == stage
    return (group.where == "first" and stage == 0) or (group.where == "last" and stage == pp - 1)


def stage_tensors(run_cfg: RunConfig, stage: int) -> list[int]:
    """Elements of each parameter tensor one rank of pipeline stage ``stage`` holds (TP-split)."""
    tp = run_cfg.parallel.tensor_model_parallel_size
    return [numel // tp if sharded else numel for group in param_groups(run_cfg) if on_stage(run_cfg, group, stage)
            for numel, sharded in group.tensors]


def stage_params(run_cfg: RunConfig, stage: int) -> int:
    """Parameters one rank of pipeline stage ``stage`` holds (TP-split)."""
    return sum(stage_tensors(run_cfg, stage))


PARAM_START_ALIGN = 64
"""megatron-core's distributed optimizer starts every parameter at a multiple of 64 elements in its buffer."""
BUCKET_END_ALIGN = 128
"""... and pads the buffer's end to a multiple of lcm(DP, 128) (``optimizer.param_layout``)."""


def buffer_layout(tensors: list[int], dp: int, distributed_optimizer: bool) -> tuple[list[tuple[int, int]], int]:
    """(each tensor's [start, end) in DDP's contiguous param/grad buffer, the buffer's length) on one rank.

    Tensors lie back to back in reverse order; the distributed optimizer starts each at a multiple of 64 and
    pads the end to lcm(DP, 128) (one bucket: ``overlap_grad_reduce`` off; each extra bucket adds less than
    lcm(DP, 128) elements)."""
    if not distributed_optimizer:
        return [], sum(tensors)
    ranges, end = [], 0
    for numel in reversed(tensors):
        start = -(-end // PARAM_START_ALIGN) * PARAM_START_ALIGN
        ranges.append((start, start + numel))
        end = start + numel
    divisor = math.lcm(dp, BUCKET_END_ALIGN)
    return ranges, -(-end // divisor) * divisor


def optimizer_elements(tensors: list[int], dp: int, distributed_optimizer: bool, rank: int | None = None) -> int:
    """Parameter elements whose optimizer state DP rank ``rank`` keeps: all of them, or, under the distributed
    optimizer, those inside its 1/DP slice of the buffer (padding holds no state); None = the largest rank's."""
    ranges, length = buffer_layout(tensors, dp, distributed_optimizer)
    if not distributed_optimizer:
        return length
    share = length // dp
    counts = [sum(max(0, min(end, (r + 1) * share) - max(start, r * share)) for start, end in ranges)
              for r in range(dp)]
    return max(counts) if rank is None else counts[rank]


@dataclass(frozen=True)
class StateBytes:
    """What one rank keeps between steps: weights, the gradient buffer and the optimizer's states."""

    parameters: int
    """Parameters this rank holds (TP-split, this pipeline stage)."""
    weights: int
    """Model weights (bf16 under bf16/fp8, else fp32), in DDP's buffer."""
    gradients: int
    """The fp32 gradient buffer (megatron reduces in fp32 under bf16)."""
    optimizer: int
    """Adam's m and v, plus fp32 main weights under bf16: whole, or this rank's 1/DP of the padded buffer."""

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer


def state_bytes(run_cfg: RunConfig, stage: int, dp: int, rank: int | None = None) -> StateBytes:
    """Per-rank bytes of weights, gradients and optimizer states of pipeline stage ``stage`` at DP=``dp``.

    Adam keeps m and v in fp32 (8 bytes); under bf16 the optimizer also keeps fp32 main weights (4) and the
    model's weights are bf16 (2); the gradient buffer is fp32 (4) either way. So 16 bytes per parameter in
    fp32 and 18 in bf16, of which the distributed optimizer divides the optimizer's 8 or 12 by DP. ``rank``:
    the DP rank (None: the one holding the most state).
    """
    tensors = stage_tensors(run_cfg, stage)
    distributed = run_cfg.parallel.use_distributed_optimizer
    _, buffer = buffer_layout(tensors, dp, distributed)
    half = run_cfg.training.half_precision
    optimizer = (12 if half else 8) * optimizer_elements(tensors, dp, distributed, rank)
    return StateBytes(parameters=sum(tensors), weights=(2 if half else 4) * buffer, gradients=4 * buffer,
                      optimizer=optimizer)
