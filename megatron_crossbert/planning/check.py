"""The planner against measurement on this CPU: ``crossbert-plan --check`` prints the table.

What it is checked against: the bytes autograd really saves for backward. ``saved_bytes`` runs one training
forward under ``torch.autograd.graph.saved_tensors_hooks`` and adds up every distinct storage handed to the
hook and still held when the forward returns (views of one tensor, and a tensor saved by several ops, count
once), parameters excluded: exactly the memory a forward leaves alive for its backward, free of allocator
noise. ``measure_case`` builds the run's
model on the current process group (one process, or each of the gloo ranks a test spawns) and feeds it the
benchmark's synthetic micro-batch through the architecture's own forward step.

The run configs (``CASES``) are tiny, but wide and long enough that the per-token terms dominate; the tests
(``tests/planning``) pin every row within 10%, the TP=2 rows on two gloo ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from megatron_crossbert.config import RunConfig, load_run_config


def saved_bytes(model: torch.nn.Module, forward) -> tuple[int, object]:
    """(bytes of the distinct non-parameter storages ``forward()`` saves for backward and still holds when it
    returns, its output). A tensor packed into a graph that is dropped before backward (the one a
    checkpointed chunk's dropout builds inside its forward) is released, so it is not counted."""
    import gc
    import weakref

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    packed: list[tuple[weakref.ref, int, int]] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            packed.append((weakref.ref(tensor), storage.data_ptr(), storage.nbytes()))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        output = forward()
    gc.collect()
    storages: dict[int, int] = {}
    for ref, pointer, nbytes in packed:
        if ref() is not None:
            storages[pointer] = max(storages.get(pointer, 0), nbytes)
    return sum(storages.values()), output


@dataclass(frozen=True)
class Measured:
    """One measured forward on this rank."""

    saved_bytes: int
    parameters: int
    """Parameters of this rank's model chunk."""


def measure_case(run_cfg: RunConfig, seed: int = 0) -> Measured:
    """Build ``run_cfg``'s model on the initialised process group and measure one micro-batch's forward."""
    from megatron.core import parallel_state

    from megatron_crossbert.architectures.registry import get_train_spec
    from megatron_crossbert.benchmarking.batches import make_batches
    from megatron_crossbert.benchmarking.cases import BenchCase
    from megatron_crossbert.architectures.build import build_model

    model = build_model(run_cfg, pre_process=parallel_state.is_pipeline_first_stage(),
                        post_process=parallel_state.is_pipeline_last_stage(), training=True)
    model.train()
    device = next(model.parameters()).device
    batch = make_batches(BenchCase("plan", run_cfg), 1, device, seed=seed)[0]
    step = get_train_spec(run_cfg.model.arch).forward_step
    count, (output, _) = saved_bytes(model, lambda: step(device, iter([batch]), model))
    output.sum().backward()  # the graph is released and the hooks' bookkeeping is real
    return Measured(saved_bytes=count, parameters=sum(p.numel() for p in model.parameters()))

BASE = ("model.vocab_size=1000", "model.make_vocab_size_divisible_by=64", "model.hidden_size=64",
        "model.num_layers=2", "model.num_attention_heads=4", "model.max_position_embeddings=128",
        "model.decoder_num_layers=1", "model.hidden_dropout=0.0", "model.attention_dropout=0.0",
        "data.seq_length=128", "model.transformer_impl=local", "training.micro_batch_size=2",
        "training.global_batch_size=4", "model.attention_backend=sdpa")
MLM = {"bert": ("model.arch=bert", "model.decoder_num_layers=0"),
       "mlm": ("model.arch=mlm", "model.encoder=modern", "model.decoder_num_layers=0")}
RECOMPUTE = ("parallel.recompute_activations=true",)
DROPOUT = ("model.hidden_dropout=0.1", "model.attention_dropout=0.1")
"""The examples' own dropout (tiny_cpu.yaml, crossbert_base.yaml, crossbert_large.yaml): on the CPU attention
dropout runs SDPA's math kernel, which keeps the attention probabilities."""

CASES: dict[str, tuple[str, ...]] = {
    "bert classic": MLM["bert"],
    "mlm modern": MLM["mlm"],
    "crossbert single view": ("masking.complementary=false",),
    "crossbert complementary": (),
    "crossbert modern complementary": ("model.encoder=modern",),
    "crossbert r=0.75 narrow decoder": ("masking.mask_ratio=0.75", "model.decoder_hidden_size=32"),
    "crossbert narrow decoder, context positions": ("model.decoder_hidden_size=32",
                                                    "model.decoder_context_position_embedding=true"),
    "crossbert modern windows, dropout": ("model.encoder=modern", "model.local_attention=16", "model.num_layers=3",
                                          "model.hidden_dropout=0.1"),
    "crossbert no document masks": ("data.document_mask=false",),
    "crossbert recompute": RECOMPUTE,
    "bert recompute": MLM["bert"] + RECOMPUTE,
    "mlm modern recompute": MLM["mlm"] + RECOMPUTE,
    "crossbert modern recompute": ("model.encoder=modern",) + RECOMPUTE,
    "crossbert dropout as tiny_cpu and crossbert_base": DROPOUT,
    "bert dropout as tiny_cpu and crossbert_base": MLM["bert"] + DROPOUT,
    "crossbert modern windows, attention dropout": ("model.encoder=modern", "model.local_attention=16") + DROPOUT,
    "crossbert recompute, dropout": RECOMPUTE + DROPOUT,
}
"""Single-process (TP=1) cases: every architecture and encoder family, views, narrow decoder, recompute,
the examples' dropout."""

TP2_CASES: dict[str, tuple[str, ...]] = {
    "crossbert TP2": ("parallel.tensor_model_parallel_size=2",),
    "crossbert modern TP2 SP": ("model.encoder=modern", "parallel.tensor_model_parallel_size=2",
                                "parallel.sequence_parallel=true"),
    "bert TP2": MLM["bert"] + ("parallel.tensor_model_parallel_size=2",),
    "crossbert TP2 recompute": ("parallel.tensor_model_parallel_size=2",) + RECOMPUTE,
    "crossbert TP2 SP context positions": ("parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true",
                                           "model.decoder_context_position_embedding=true"),
}
"""Two gloo ranks, tensor parallel (and sequence parallel): what TP splits and what it keeps whole."""

DISTRIBUTED_OPTIMIZER = ("parallel.use_distributed_optimizer=true", "training.train_iters=2",
                         "training.lr_warmup_iters=0")
"""Two gloo ranks, data parallel: the distributed optimizer's real buffers and states."""


def config(*overrides: str) -> RunConfig:
    return load_run_config(None, list(BASE) + list(overrides))


def predicted_bytes(run_cfg: RunConfig) -> int:
    """One micro-batch of the whole model on one pipeline stage, as this CPU runs it."""
    from megatron_crossbert.planning.activations import micro_batch_activations
    from megatron_crossbert.planning.device import runtime

    acts = micro_batch_activations(run_cfg, runtime(run_cfg, cuda=False))
    return acts.stage_bytes(0, 1, run_cfg.model.num_layers)


def table_rows() -> list[str]:
    """Measured and predicted saved bytes of every single-process case, as markdown rows."""
    from megatron_crossbert.platform import distributed as platform
    from megatron_crossbert.planning.parameters import stage_params

    rows = ["| case | saved bytes (measured) | predicted | predicted / measured | parameters (model = planner) |",
            "| --- | ---: | ---: | ---: | --- |"]
    for name, overrides in CASES.items():
        run_cfg = config(*overrides)
        platform.initialize(run_cfg.parallel, 1)
        measured = measure_case(run_cfg)
        predicted = predicted_bytes(run_cfg)
        same = "yes" if measured.parameters == stage_params(run_cfg, 0) else "NO"
        rows.append(f"| {name} | {measured.saved_bytes:,} | {predicted:,} | {predicted / measured.saved_bytes:.3f} "
                    f"| {measured.parameters:,} ({same}) |")
    return rows

