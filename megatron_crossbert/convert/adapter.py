"""Pure state-dict adapter: our megatron encoder (+ BERT MLM head) <-> Hugging Face ``MegatronBert``.

Both directions are driven by the literal tables in ``keymap.py``; the only tensor surgery is the
head-interleaved QKV split/merge of ``layout.py`` and the synthesised all-zero token-type rows (our
models have no token types; HF needs ``type_vocab_size >= 1``). The functions are strict: a megatron
tensor that is neither mapped nor knowingly discarded, a missing tensor, or a shape that disagrees with
the config raises ``ConversionError`` instead of producing a model that loads but computes garbage.
Inputs are expected at TP=1 (see ``layout.gather_tensor_parallel`` for raw shards).
"""

from __future__ import annotations

import torch

from megatron_crossbert.config import ModelConfig
from megatron_crossbert.convert import keymap
from megatron_crossbert.convert.errors import ConversionError
from megatron_crossbert.convert.layout import merge_qkv, split_qkv

DEFAULT_TYPE_VOCAB_SIZE = 2
"""Zero token-type rows written on export: 2 so BERT-style tokenizers' pair ids (0/1) stay harmless."""


def _clean_megatron(state_dict: dict) -> dict[str, torch.Tensor]:
    """Drop ``_extra_state``/None entries, rename TE fused-norm keys, detach to contiguous CPU copies."""
    out = {}
    for key, value in state_dict.items():
        if key.endswith("_extra_state") or value is None:
            continue
        if not isinstance(value, torch.Tensor):
            raise ConversionError(f"megatron entry {key} is a {type(value).__name__}, not a tensor")
        out[keymap.normalize_te_key(key)] = value.detach().to("cpu").contiguous()
    return out


def _take(source: dict[str, torch.Tensor], key: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """Pop ``key`` from ``source`` (a private copy), checking its shape when given."""
    if key not in source:
        raise ConversionError(f"missing tensor {key!r}")
    tensor = source.pop(key)
    if shape is not None and tuple(tensor.shape) != shape:
        raise ConversionError(f"{key} has shape {tuple(tensor.shape)}, config expects {shape}")
    return tensor.clone()


def _encoder_shapes(cfg: ModelConfig, vocab_rows: int) -> dict[str, tuple[int, ...]]:
    """Expected megatron shapes of the tensors whose size the HF config depends on."""
    h = cfg.hidden_size
    return {
        "embedding.word_embeddings.weight": (vocab_rows, h),
        "embedding.position_embeddings.weight": (cfg.max_position_embeddings, h),
        "encoder.layers.{i}.self_attention.linear_qkv.weight": (3 * h, h),
        "encoder.layers.{i}.self_attention.linear_qkv.bias": (3 * h,),
        "encoder.layers.{i}.mlp.linear_fc1.weight": (cfg.ffn, h),
        "encoder.layers.{i}.mlp.linear_fc2.weight": (h, cfg.ffn),
    }


def _encoder_to_hf(src: dict, cfg: ModelConfig, shapes: dict) -> dict[str, torch.Tensor]:
    out = {hf: _take(src, mg, shapes.get(mg)) for mg, hf in keymap.ENCODER_GLOBAL_KEYS.items()}
    for i in range(cfg.num_layers):
        for mg, hf in keymap.ENCODER_LAYER_KEYS.items():
            out[keymap.expand(hf, i)] = _take(src, keymap.expand(mg, i), shapes.get(mg))
        for mg, hf_parts in keymap.ENCODER_QKV_KEYS.items():
            fused = _take(src, keymap.expand(mg, i), shapes.get(mg))
            for hf, part in zip(hf_parts, split_qkv(fused, cfg.num_attention_heads)):
                out[keymap.expand(hf, i)] = part
    return out


def _check_tied_output(src: dict, word_embeddings: torch.Tensor) -> None:
    """An untied megatron output layer has no place in HF's tied decoder; refuse unless it is a copy."""
    weight = src.pop("output_layer.weight", None)
    if weight is not None and not torch.equal(weight, word_embeddings):
        raise ConversionError("output_layer.weight is not tied to the word embeddings; HF MegatronBert "
                              "ties its MLM decoder to them, so this head has no exact HF target")


def megatron_to_hf(state_dict: dict, model_cfg: ModelConfig, *, with_mlm_head: bool = False,
                   type_vocab_size: int = DEFAULT_TYPE_VOCAB_SIZE) -> dict[str, torch.Tensor]:
    """TP=1 megatron state dict -> HF state dict.

    ``with_mlm_head=False`` gives ``MegatronBertModel`` keys (plus a zero, untrained pooler so loading
    reports nothing missing); ``True`` gives ``MegatronBertForMaskedLM`` keys (``bert.`` prefix and
    ``cls.predictions.*``; the decoder weight is tied to the word embeddings and not stored).
    """
    if with_mlm_head and model_cfg.arch != "bert":
        raise ConversionError("only the BERT baseline has an MLM head on the encoder output")
    src = _clean_megatron(state_dict)
    rows = src.get("embedding.word_embeddings.weight", torch.empty(0, 0)).shape[0]
    out = _encoder_to_hf(src, model_cfg, _encoder_shapes(model_cfg, rows))
    out[keymap.HF_TOKEN_TYPE_KEY] = torch.zeros(type_vocab_size, model_cfg.hidden_size)
    if with_mlm_head:
        _check_tied_output(src, out["embeddings.word_embeddings.weight"])
        out = {keymap.HF_BASE_PREFIX + key: value for key, value in out.items()}
        out.update({hf: _take(src, mg) for mg, hf in keymap.MLM_HEAD_KEYS.items()})
    else:
        h = model_cfg.hidden_size
        out.update(zip(keymap.HF_POOLER_KEYS, (torch.zeros(h, h), torch.zeros(h))))
    _reject_leftovers(src, model_cfg, with_mlm_head)
    return out


def _reject_leftovers(src: dict, cfg: ModelConfig, with_mlm_head: bool) -> None:
    """Fail on megatron tensors that were neither mapped nor deliberately discarded."""
    if cfg.arch == "crossbert":
        discard = keymap.CROSSBERT_DISCARDED_PREFIXES
    else:
        discard = () if with_mlm_head else keymap.HEAD_PREFIXES
    leftover = sorted(key for key in src if not key.startswith(discard))
    if leftover:
        raise ConversionError(f"megatron tensors with no HF MegatronBert target: {leftover[:6]}"
                              f"{' ...' if len(leftover) > 6 else ''}")


def _clean_hf(state_dict: dict) -> dict[str, torch.Tensor]:
    """Strip the ``bert.`` base-model prefix; keep head keys (``cls.*``) as they are."""
    out = {}
    for key, value in state_dict.items():
        bare = key[len(keymap.HF_BASE_PREFIX):] if key.startswith(keymap.HF_BASE_PREFIX) else key
        out[bare] = value.detach().to("cpu").contiguous()
    return out


def _drop_token_types(src: dict) -> None:
    """Token-type rows must be zero: our models have none, and folding non-zero rows would not be exact."""
    rows = src.pop(keymap.HF_TOKEN_TYPE_KEY, None)
    if rows is not None and bool(rows.any()):
        raise ConversionError(f"{keymap.HF_TOKEN_TYPE_KEY} has non-zero rows; megatron-crossbert models have "
                              "no token-type embeddings, so this model has no exact native equivalent")


def _encoder_from_hf(src: dict, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    out = {mg: _take(src, hf) for mg, hf in keymap.ENCODER_GLOBAL_KEYS.items()}
    for i in range(cfg.num_layers):
        for mg, hf in keymap.ENCODER_LAYER_KEYS.items():
            out[keymap.expand(mg, i)] = _take(src, keymap.expand(hf, i))
        for mg, hf_parts in keymap.ENCODER_QKV_KEYS.items():
            q, k, v = (_take(src, keymap.expand(hf, i)) for hf in hf_parts)
            out[keymap.expand(mg, i)] = merge_qkv(q, k, v, cfg.num_attention_heads)
    return out


def _mlm_head_from_hf(src: dict, word_embeddings: torch.Tensor) -> dict[str, torch.Tensor]:
    """``cls.predictions.*`` -> megatron LM head; a stored decoder weight must be the tied embedding."""
    decoder = src.pop("cls.predictions.decoder.weight", None)
    if decoder is not None and not torch.equal(decoder, word_embeddings):
        raise ConversionError("cls.predictions.decoder.weight is not tied to the word embeddings; "
                              "megatron's BERT output layer is, so this head cannot be imported exactly")
    src.pop("cls.predictions.decoder.bias", None)  # tied to cls.predictions.bias in HF
    return {mg: _take(src, hf) for mg, hf in keymap.MLM_HEAD_KEYS.items()}


def has_mlm_head(hf_state: dict) -> bool:
    """Whether an HF state dict carries a ``MegatronBertForMaskedLM`` head."""
    return any(key.startswith("cls.predictions.") for key in hf_state)


def hf_to_megatron(hf_state: dict, model_cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """HF ``MegatronBertModel``/``ForMaskedLM`` state dict -> megatron encoder (+ LM head) state dict.

    The pooler is dropped (unused by our models); token-type rows must be zero. For CrossBERT an MLM
    head is refused (CrossBERT's LM head reads decoder outputs); the decoder itself is not in HF files.
    """
    src = _clean_hf(hf_state)
    _drop_token_types(src)
    for key in keymap.HF_POOLER_KEYS:
        src.pop(key, None)
    out = _encoder_from_hf(src, model_cfg)
    if has_mlm_head(src):
        if model_cfg.arch != "bert":
            raise ConversionError("an HF MLM head can only be imported into the BERT baseline (arch='bert')")
        out.update(_mlm_head_from_hf(src, out["embedding.word_embeddings.weight"]))
    if src:
        raise ConversionError(f"HF tensors with no megatron target: {sorted(src)[:6]}")
    return out
