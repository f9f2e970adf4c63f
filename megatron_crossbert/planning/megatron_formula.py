"""Megatron-LM's own estimate (``megatron/training/theoretical_memory_usage.py``), restated to sit beside ours.

Megatron-LM prices a GPT-shaped model: ``12 L h^2 + 4 L h + 2 h`` transformer parameters (an MLP of 4h, so a
GeGLU or a narrower decoder is not seen) plus one vocabulary table, at 18 bytes each (6 + 12/DP with the
distributed optimizer), on the most loaded stage; and activations after Korthikanti et al. (Table 2) for
sequence parallelism with selective recompute in 16 bits: ``s b h (18 + 4 ffn/h)`` per layer for all L
tokens, the embedding's ids and dropout for PP micro-batches in flight, and on a single stage the output
layer's input and the cross-entropy over the full vocabulary at every position, all divided by TP. It knows
no visible/target split, no decoder, no sparse logits and no second view: see ``docs/results.md`` for how it
compares with ``planning.activations`` at BERT's shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from megatron_crossbert.config import RunConfig


@dataclass(frozen=True)
class MegatronEstimate:
    """Megatron-LM's two numbers, in bytes, for the most loaded rank."""

    weight_and_optimizer_bytes: float
    activation_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weight_and_optimizer_bytes + self.activation_bytes


def megatron_lm_estimate(run_cfg: RunConfig, dp: int, num_microbatches: int) -> MegatronEstimate:
    """What ``--report-theoretical-memory`` would print for this run's shape (it assumes SP and selective
    recompute whatever the run sets; the interleaved schedule is not used here)."""
    model, parallel = run_cfg.model, run_cfg.parallel
    tp, pp = parallel.tensor_model_parallel_size, parallel.pipeline_model_parallel_size
    h, layers, vocab = model.hidden_size, model.num_layers, model.padded_vocab_size(tp)
    transformer = 12 * layers * h * h + 4 * layers * h + 2 * h
    most_loaded = (transformer / pp + h * vocab) / tp
    per_param = 6 + 12 / dp if parallel.use_distributed_optimizer else 18
    s, b = run_cfg.data.seq_length, run_cfg.training.micro_batch_size
    activations = s * b * h * (18 + 4 * model.ffn / h) * layers + 8 * s * b * pp + s * b * h * pp
    if pp > 1:
        activations *= min(1, num_microbatches / pp)
    else:
        activations += s * b * h * 4 * (1 + vocab / h)
    return MegatronEstimate(most_loaded * per_param, activations / tp)
