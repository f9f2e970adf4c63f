"""Run configs the planner is checked on: tiny, but wide and long enough that its per-token terms dominate."""

from __future__ import annotations

from megatron_crossbert.config import RunConfig, load_run_config

BASE = ("model.vocab_size=1000", "model.make_vocab_size_divisible_by=64", "model.hidden_size=64",
        "model.num_layers=2", "model.num_attention_heads=4", "model.max_position_embeddings=128",
        "model.decoder_num_layers=1", "model.hidden_dropout=0.0", "model.attention_dropout=0.0",
        "data.seq_length=128", "model.transformer_impl=local", "training.micro_batch_size=2",
        "training.global_batch_size=4", "model.attention_backend=sdpa")
MLM = {"bert": ("model.arch=bert", "model.decoder_num_layers=0"),
       "mlm": ("model.arch=mlm", "model.encoder=modern", "model.decoder_num_layers=0")}
RECOMPUTE = ("parallel.recompute_activations=true",)

CASES: dict[str, tuple[str, ...]] = {
    "bert classic": MLM["bert"],
    "mlm modern": MLM["mlm"],
    "crossbert single view": ("masking.complementary=false",),
    "crossbert complementary": (),
    "crossbert modern complementary": ("model.encoder=modern",),
    "crossbert r=0.75 narrow decoder": ("masking.mask_ratio=0.75", "model.decoder_hidden_size=32"),
    "crossbert modern windows, dropout": ("model.encoder=modern", "model.local_attention=16", "model.num_layers=3",
                                          "model.hidden_dropout=0.1"),
    "crossbert no document masks": ("data.document_mask=false",),
    "crossbert recompute": RECOMPUTE,
    "bert recompute": MLM["bert"] + RECOMPUTE,
    "mlm modern recompute": MLM["mlm"] + RECOMPUTE,
    "crossbert modern recompute": ("model.encoder=modern",) + RECOMPUTE,
}
"""Single-process (TP=1) cases: every architecture and encoder family, views, narrow decoder, recompute."""

TP2_CASES: dict[str, tuple[str, ...]] = {
    "crossbert TP2": ("parallel.tensor_model_parallel_size=2",),
    "crossbert modern TP2 SP": ("model.encoder=modern", "parallel.tensor_model_parallel_size=2",
                                "parallel.sequence_parallel=true"),
    "bert TP2": MLM["bert"] + ("parallel.tensor_model_parallel_size=2",),
    "crossbert TP2 recompute": ("parallel.tensor_model_parallel_size=2",) + RECOMPUTE,
}
"""Two gloo ranks, tensor parallel (and sequence parallel): what TP splits and what it keeps whole."""

DISTRIBUTED_OPTIMIZER = ("parallel.use_distributed_optimizer=true", "training.train_iters=2",
                         "training.lr_warmup_iters=0")
"""Two gloo ranks, data parallel: the distributed optimizer's real buffers and states."""


def config(*overrides: str) -> RunConfig:
    return load_run_config(None, list(BASE) + list(overrides))
