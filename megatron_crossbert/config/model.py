"""The model section: encoder and reconstruction-decoder dimensions, attention kernels and windows.

Architecture and encoder names come from ``arch``'s registry, their one owner.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import ClassVar, Literal

from megatron_crossbert.arch import ENCODERS, REGISTRY, get_arch, get_encoder
from megatron_crossbert.attention_windows import check_window_options
from megatron_crossbert.config.checks import (_at_least, _check_choices, _fraction, _optional_positive, _positive,
                                              _require, setting)

ArchName = Literal[tuple(REGISTRY)]
"""The registered architectures (``arch.REGISTRY``, the one owner of the names)."""
EncoderName = Literal[tuple(ENCODERS)]
"""The registered encoder families (``arch.ENCODERS``)."""
AttentionBackend = Literal["auto", "sdpa", "flex", "megatron"]
"""Core-attention kernels (``models.core_attention``): auto = flex on a GPU when masks apply, else sdpa."""
ATTENTION_KERNELS = tuple(name for name in typing.get_args(AttentionBackend) if name != "auto")
"""What ``model.attention_backend`` resolves to: its values but 'auto'."""

RESOLVED_BY = {"ffn_hidden_size": "ffn", "decoder_hidden_size": "dec_hidden",
               "decoder_num_attention_heads": "dec_heads", "decoder_ffn_hidden_size": "dec_ffn"}
"""Field -> the ``ModelConfig`` property that resolves its None default (``ModelConfig.resolved``)."""


@dataclass
class ModelConfig:
    """Encoder (kept) and reconstruction decoder (discarded after pretraining) dimensions."""

    SECTION: ClassVar[str] = "model"
    arch: ArchName = "crossbert"
    """A name in ``arch.REGISTRY``: 'crossbert' = encoder on visible tokens + cross-attention decoder;
    'bert' = megatron-core BertModel baseline (classic encoder); 'mlm' = modern encoder + MLM head."""
    encoder: EncoderName = "classic"
    """Encoder family (``arch.ENCODERS``): 'classic' = BERT layout (learned positions, GELU, biases);
    'modern' = ModernBERT layout (embedding norm, RoPE, GeGLU, no biases, no attention norm on layer 0)."""
    rotary_base: float = 160000.0
    """RoPE base (theta) of the modern encoder and decoder (ModernBERT's global layers use 160000)."""
    decoder_position_embedding: bool = True
    """CrossBERT decoder queries add a learned position embedding of their target position. With the
    modern encoder RoPE already places queries and keys, so this can be turned off."""
    decoder_context_position_embedding: bool = False
    """CrossBERT with learned positions (the classic encoder): the decoder adds a learned position embedding of
    each visible token's position to the encoder states its cross-attention reads (its context). Without it, a
    query finds the visible tokens near its target only through positions the encoder writes into its states;
    the modern encoder's cross-attention rotates keys at their positions instead, so it is refused there."""
    encoder_token_loss_weight: float = 0.0
    """CrossBERT: weight of an auxiliary loss that decodes each visible token's own id from its encoder state
    through the reconstruction branch's LM head and the tied output layer (0 = off, the paper's objective). An
    MLM reads the encoder's states through the tied embeddings; CrossBERT's loss reads them only through the
    decoder's cross-attention, and this weight measures what reading them directly does to the features. The
    head is shared, so the decoder must be as wide as the encoder. Trains only: the reported loss stays the
    reconstruction loss."""
    vocab_size: int = 32768
    """Tokenizer vocabulary size; the embedding table is padded up (see make_vocab_size_divisible_by)."""
    make_vocab_size_divisible_by: int = 128
    """Embedding rows are padded to a multiple of this (GEMM-friendly). It must be divisible by the TP
    size, so the table height - and hence every checkpoint - is the same at any TP (resharding works)."""
    hidden_size: int = 768
    """Encoder width; also the width of the tied word embeddings."""
    num_layers: int = 12
    """Encoder layers (split across pipeline stages)."""
    num_attention_heads: int = 12
    """Encoder attention heads; must divide hidden_size."""
    ffn_hidden_size: int | None = None
    """Encoder MLP width; None means 4 * hidden_size."""
    max_position_embeddings: int = 512
    """Rows of the learned absolute position table; the packed sequence length must fit in it."""
    decoder_num_layers: int = 2
    """Reconstruction-branch layers (self-attn, cross-attn to the encoder, MLP). Ignored for 'bert'."""
    decoder_hidden_size: int | None = None
    """Decoder width; None means hidden_size. May be narrower (e.g. hidden_size/2): cross-attention keys and
    values project the encoder output from hidden_size, and the LM head's dense maps the decoder width back
    to hidden_size, so the output layer stays tied to the word embeddings."""
    decoder_num_attention_heads: int | None = None
    """Decoder heads; None keeps the encoder's head dim at the decoder width (num_attention_heads at full
    width, half of them at half width)."""
    decoder_ffn_hidden_size: int | None = None
    """Decoder MLP width; None means 4 * decoder width."""
    decoder_cross_attention_only: bool = False
    """CrossBERT decoder layers hold their cross-attention to the encoder only: no self-attention among the
    queries and no MLP (megatron-core's identity in those slots). The weakest decoder that still reads the
    encoder: each target is predicted from its own query (mask embedding + position) and the visible states."""
    layernorm_epsilon: float = 1e-5
    """LayerNorm epsilon; exported verbatim to HF (whose default 1e-12 would be wrong)."""
    hidden_dropout: float = 0.1
    """Dropout after attention/MLP projections and on embeddings."""
    attention_dropout: float = 0.1
    """Dropout on attention probabilities."""
    init_method_std: float = 0.02
    """Std of the normal initialiser."""
    bias_gelu_fusion: bool = False
    """Fused bias+GELU uses the tanh approximation; exported as HF 'gelu_pytorch_tanh' when True."""
    transformer_impl: Literal["auto", "local", "transformer_engine"] = "auto"
    """Layer spec: 'auto' = Transformer Engine when CUDA and TE are present, else megatron-core's local spec."""
    sparse_prediction: bool = True
    """MLM baselines ('bert', 'mlm'): run the LM head and the vocab projection on the masked positions only
    (ModernBERT / HF ``sparse_prediction``); same loss and weights. False = Megatron-LM's dense head on
    all L positions, for parity. CrossBERT always predicts its targets only."""
    attention_backend: AttentionBackend = "auto"
    """Core attention of every layer (both specs): 'sdpa' = torch scaled_dot_product_attention (dense bool
    mask when documents/windows apply), 'flex' = compiled FlexAttention with a block mask (GPU; no attention
    dropout), 'megatron' = megatron-core's unfused DotProductAttention (the reference); 'auto' = flex on a
    GPU when masks apply and attention_dropout is 0, else sdpa. Resolved and logged once per run."""
    local_attention: int = 0
    """ModernBERT's sliding window in tokens (0 = every layer global; ModernBERT uses 128): a local layer's
    query sees keys within local_attention // 2 ORIGINAL positions. Modern encoder only."""
    global_attn_every_n_layers: int = 3
    """ModernBERT's pattern: layer i (0-based) is global when i % n == 0, local otherwise (with windows on).
    The decoder follows the same rule over its own layers."""
    local_rotary_base: float = 10000.0
    """RoPE base of the local layers (ModernBERT's local_rope_theta); rotary_base stays the global layers'."""

    def __post_init__(self) -> None:
        _check_choices(self)  # before the registry look-ups, so an unknown name is named with its key
        spec = get_arch(self.arch)
        _require(self.encoder in spec.encoders, f"{setting(self, 'encoder')} cannot build {setting(self, 'arch')}, "
                                                f"which is built with encoder {' or '.join(spec.encoders)}")
        _positive(self, "vocab_size", "make_vocab_size_divisible_by", "hidden_size", "num_layers",
                  "num_attention_heads", "max_position_embeddings", "layernorm_epsilon", "rotary_base")
        _require(self.init_method_std > 0,
                 f"{setting(self, 'init_method_std')} must be > 0 (0 starts every weight at 0)")
        _require(self.hidden_size % self.num_attention_heads == 0,
                 f"{setting(self, 'num_attention_heads')} must divide {setting(self, 'hidden_size')}")
        _require(self.decoder_num_layers >= int(spec.has_reconstruction_decoder),
                 f"{setting(self, 'decoder_num_layers')} must be >= 1 for {setting(self, 'arch')}")
        _require(not self.decoder_cross_attention_only or spec.has_reconstruction_decoder,
                 f"{setting(self, 'decoder_cross_attention_only')} needs a reconstruction decoder, which "
                 f"{setting(self, 'arch')} does not have")
        _require(not self.decoder_context_position_embedding or (
            spec.has_reconstruction_decoder and get_encoder(self.encoder).learned_positions),
            f"{setting(self, 'decoder_context_position_embedding')} needs a reconstruction decoder reading an encoder "
            f"with learned positions ({setting(self, 'arch')} with {setting(self, 'encoder')} has "
            f"{'rotary positions' if spec.has_reconstruction_decoder else 'no reconstruction decoder'})")
        self._check_token_loss(spec.has_reconstruction_decoder)
        _require(get_encoder(self.encoder).linear_bias or not self.bias_gelu_fusion,
                 f"{setting(self, 'bias_gelu_fusion')} needs linear biases, which {setting(self, 'encoder')} "
                 "does not have")
        _optional_positive(self, "ffn_hidden_size", "decoder_hidden_size", "decoder_num_attention_heads",
                           "decoder_ffn_hidden_size")
        _require(self.dec_hidden % self.dec_heads == 0,
                 f"{setting(self, 'decoder_num_attention_heads')} ({self.dec_heads} heads) must divide the decoder "
                 f"width {self.dec_hidden} ({setting(self, 'decoder_hidden_size')}, {setting(self, 'hidden_size')})")
        _fraction(self, "hidden_dropout")
        _fraction(self, "attention_dropout")
        self._check_attention()

    def _check_token_loss(self, has_decoder: bool) -> None:
        """The visible-token loss shares the decoder's LM head, so it needs a decoder of the encoder's width."""
        _at_least(self, "encoder_token_loss_weight", 0.0, "0 turns it off")
        if not self.encoder_token_loss_weight:
            return
        _require(has_decoder, f"{setting(self, 'encoder_token_loss_weight')} needs CrossBERT's reconstruction "
                              f"branch, which {setting(self, 'arch')} does not have")
        _require(self.dec_hidden == self.hidden_size,
                 f"{setting(self, 'encoder_token_loss_weight')} shares the decoder's LM head, so the decoder width "
                 f"{self.dec_hidden} must equal {setting(self, 'hidden_size')}")

    def _check_attention(self) -> None:
        """Windows and backends that cannot work are refused here, before anything is built."""
        check_window_options(self.local_attention, self.global_attn_every_n_layers)
        _positive(self, "local_rotary_base")
        _require(not self.local_attention or not get_encoder(self.encoder).learned_positions,
                 f"{setting(self, 'local_attention')} needs model.encoder='modern' (RoPE, as ModernBERT); "
                 f"{setting(self, 'encoder')} has no exact Hugging Face target with windows")
        _require(self.attention_backend != "flex" or self.attention_dropout == 0,
                 f"{setting(self, 'attention_backend')} has no attention dropout: it needs model.attention_dropout=0, "
                 f"got {setting(self, 'attention_dropout')} (or use sdpa)")

    @property
    def windowed(self) -> bool:
        """Some layers attend locally (``attention_windows`` owns which)."""
        return self.local_attention > 0 and self.global_attn_every_n_layers > 1

    def resolved(self, key: str) -> object:
        """The value the field ``key`` takes effect as: a None default resolved (``ffn_hidden_size`` None is
        ``4 * hidden_size``), any other field as it is. Checks that compare two configs compare this and name
        ``model.<key>``, the key a user sets, never the property that resolves it."""
        if key not in {field.name for field in dataclasses.fields(self)}:
            raise KeyError(f"ModelConfig has no field {key!r}")
        return getattr(self, RESOLVED_BY.get(key, key))

    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def dec_hidden(self) -> int:
        return self.decoder_hidden_size or self.hidden_size

    @property
    def dec_heads(self) -> int:
        head_dim = self.hidden_size // self.num_attention_heads
        return self.decoder_num_attention_heads or max(1, self.dec_hidden // head_dim)

    @property
    def dec_ffn(self) -> int:
        return self.decoder_ffn_hidden_size or 4 * self.dec_hidden

    def padded_vocab_size(self, tensor_parallel_size: int = 1) -> int:
        """Embedding rows: vocab_size rounded up to make_vocab_size_divisible_by, independent of TP.

        Megatron-LM pads to ``multiple * TP``, which changes the table height with the TP size and
        breaks resharded resume; we instead require the multiple itself to be TP-divisible.
        """
        multiple = self.make_vocab_size_divisible_by
        _require(multiple % tensor_parallel_size == 0,
                 f"{setting(self, 'make_vocab_size_divisible_by')} must be divisible by "
                 f"parallel.tensor_model_parallel_size={tensor_parallel_size} so each rank holds an equal slice "
                 "of the embedding table")
        return -(-self.vocab_size // multiple) * multiple
