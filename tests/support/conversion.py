"""Helpers for the HF conversion tests (no tests here): tiny configs, tokenizers and checkpoints.

Weights are randomised, including LayerNorm gammas/betas and biases: megatron initialises those to
1/0, which would hide a swapped or mis-mapped LayerNorm or bias.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from megatron_crossbert.platform import distributed as platform
from megatron_crossbert.config import DataConfig, ModelConfig, ParallelConfig, RunConfig, TrainingConfig

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


TOL = 1e-5
"""fp32 max abs diff allowed between the native encoder and an HF export."""
LENGTHS = [20, 13, 5, 20]
"""Row lengths of the padded test batches (ragged, so padding is exercised)."""


def tiny_run_config(arch: str = "crossbert", tokenizer: str = "", tp: int = 1, **model_overrides) -> RunConfig:
    """A 2-layer h=32 model; vocab 300 pads to 384 rows at TP=1 and 512 at TP=2 (multiple 128*TP)."""
    model = dict(arch=arch, vocab_size=300, hidden_size=32, num_layers=2, num_attention_heads=4,
                 ffn_hidden_size=64, max_position_embeddings=64, decoder_num_layers=1,
                 hidden_dropout=0.0, attention_dropout=0.0, transformer_impl="local")
    model.update(model_overrides)
    return RunConfig(model=ModelConfig(**model), data=DataConfig(seq_length=32, tokenizer=tokenizer),
                     parallel=ParallelConfig(tensor_model_parallel_size=tp),
                     training=TrainingConfig(micro_batch_size=2, global_batch_size=2, train_iters=1,
                                             lr_warmup_iters=0, seed=7))


def make_tokenizer(directory: Path, num_words: int = 120) -> Path:
    """A WordPiece tokenizer over words w0..w{n-1} saved as an HF fast-tokenizer directory."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + [f"w{i}" for i in range(num_words)])}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    fast = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]", model_max_length=int(1e30))
    fast.save_pretrained(str(directory))
    return directory


def randomize_(model: torch.nn.Module, seed: int = 3) -> None:
    """Non-trivial values everywhere: LN gamma ~ 1 +- 0.2, betas/biases and weights ~ N(0, 0.1)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            base = 1.0 if name.endswith("norm.weight") else 0.0
            param.copy_(base + 0.1 * torch.randn(param.shape, generator=gen))


def build_tp1(run_cfg: RunConfig) -> torch.nn.Module:
    """build_model at TP=1 (caller holds a TP=1 parallel state)."""
    from megatron_crossbert.architectures.build import build_model

    return build_model(run_cfg).eval()


def make_checkpoint(root: Path, run_cfg: RunConfig, seed: int = 3) -> dict[str, torch.Tensor]:
    """Save a randomised TP=1 model-only checkpoint under ``root``; returns its state dict."""
    from megatron_crossbert.checkpoint.save import save_model_only

    platform.initialize(ParallelConfig(), run_cfg.training.seed)
    try:
        model = build_tp1(run_cfg)
        randomize_(model, seed)
        save_model_only(model, run_cfg, root)
        return {k: v.clone() for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
    finally:
        platform.destroy()


def load_native(checkpoint: Path, run_cfg: RunConfig | None = None) -> torch.nn.Module:
    """A TP=1 model with the checkpoint's weights (caller holds a TP=1 parallel state)."""
    from tests.support.training import read_run_config
    from megatron_crossbert.checkpoint.load import load_model_weights
    from megatron_crossbert.convert.native import single_process_config

    model = build_tp1(single_process_config(run_cfg or read_run_config(checkpoint)))
    load_model_weights(model, checkpoint)
    return model


def padded_batch(vocab: int, lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (pad id 0) and the HF attention mask (1 = keep)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (len(lengths), max(lengths)), generator=gen)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    return ids.masked_fill(mask == 0, 0), mask


def native_features(checkpoint: Path, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``encode`` of the checkpoint's model at TP=1 (initialises a TP=1 parallel state)."""
    from megatron_crossbert.models import model_encode

    platform.initialize(ParallelConfig(), 0)
    with torch.no_grad():
        return model_encode(load_native(checkpoint), ids, mask)


def hf_features(out: Path, impl: str, ids: torch.Tensor, mask: torch.Tensor) -> tuple[str, torch.Tensor]:
    """(class name, last_hidden_state) of stock ``AutoModel`` loaded with ``attn_implementation=impl``."""
    from transformers import AutoModel

    hf = AutoModel.from_pretrained(out, use_safetensors=True, attn_implementation=impl).eval()
    assert hf.config._attn_implementation == impl
    with torch.no_grad():
        return type(hf).__name__, hf(input_ids=ids, attention_mask=mask).last_hidden_state


def max_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    """Max abs difference over the kept (mask == 1) positions."""
    return (a - b)[mask.bool()].abs().max().item()


def left_padded(ids: torch.Tensor, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows of a right-padded batch moved to the right end (left padding, pad id 0)."""
    left_ids, left_mask = torch.zeros_like(ids), torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        left_ids[row, -length:], left_mask[row, -length:] = ids[row, :length], 1
    return left_ids, left_mask


def left_padded_diff(got: torch.Tensor, native: torch.Tensor, lengths: list[int]) -> float:
    """Max abs difference between left-padded HF rows and the native right-padded rows."""
    return max((got[row, -n:] - native[row, :n]).abs().max().item() for row, n in enumerate(lengths))


def sentence_transformers_check(out: Path, checkpoint: Path, expected_class: str) -> float:
    """Max abs difference between ``SentenceTransformer(out).encode`` and masked-mean native features."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    texts = ["w1 w2 w3 w4 w5 w6", "w7 w8", "w9 w10 w11 w12 w13 w14 w15 w16 w17"]
    batch = AutoTokenizer.from_pretrained(out)(texts, padding=True, return_tensors="pt")
    assert batch["input_ids"][1].tolist()[:4] == [2, 12, 13, 3]  # [CLS] w7 w8 [SEP]: real ids, not [UNK]
    features = native_features(checkpoint, batch["input_ids"], batch["attention_mask"])
    keep = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (features * keep).sum(1) / keep.sum(1)
    st = SentenceTransformer(str(out), device="cpu", model_kwargs={"use_safetensors": True})
    assert type(st[0].auto_model).__name__ == expected_class
    got = torch.as_tensor(st.encode(texts, convert_to_numpy=True))
    return (got - pooled).abs().max().item()


def encoder_keys(state: dict[str, torch.Tensor]) -> list[str]:
    """The exported encoder tensors of a native state dict."""
    return [k for k in state if k.startswith(("embedding.", "encoder.")) and not k.endswith("_extra_state")]


def read_safetensors(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())
