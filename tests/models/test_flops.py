"""FLOPs accounting against a hand count, and the encoder saving that motivates CrossBERT."""

from __future__ import annotations

import pytest

from megatron_crossbert.config import load_run_config
from megatron_crossbert.models.flops import (
    decoder_forward_flops,
    encoder_forward_flops,
    model_flops_per_sample,
)

TINY = ["model.vocab_size=100", "model.make_vocab_size_divisible_by=128", "model.hidden_size=8",
        "model.num_layers=2", "model.num_attention_heads=2", "model.max_position_embeddings=16",
        "model.decoder_num_layers=1", "data.seq_length=4"]


def test_crossbert_matches_hand_count():
    cfg = load_run_config(None, TINY)        # L=4, Lv=2, T=2, h=8, ffn=32, padded vocab 128, 2 views
    h, f, lv, t, vocab = 8, 32, 2, 2, 128
    enc_layer = (2 * lv * h * 3 * h) + (2 * lv * lv * h) * 2 + (2 * lv * h * h) + (2 * lv * h * f) * 2
    self_attn = (2 * t * h * 3 * h) + (2 * t * t * h) * 2 + (2 * t * h * h)
    cross_attn = (2 * t * h * h) + (2 * lv * h * 2 * h) + (2 * t * lv * h) * 2 + (2 * t * h * h)
    dec_layer = self_attn + cross_attn + (2 * t * h * f) * 2
    head = 2 * t * h * h + 2 * t * h * vocab
    per_view = 2 * enc_layer + 1 * dec_layer + head
    assert encoder_forward_flops(cfg, lv) == 2 * enc_layer
    assert decoder_forward_flops(cfg, t, lv) == dec_layer
    assert model_flops_per_sample(cfg) == 3 * 2 * per_view
    single = load_run_config(None, TINY + ["masking.complementary=false"])
    assert model_flops_per_sample(single) == 3 * per_view


def test_bert_counts_the_head_where_it_runs():
    """Dense head: logits at all L positions; sparse prediction (default): at round(p*L) positions only."""
    h, f, seq, vocab = 8, 32, 20, 128
    tiny = TINY + [f"data.seq_length={seq}", "model.max_position_embeddings=32", "model.arch=bert"]
    layer = 2 * seq * h * 3 * h + 4 * seq * seq * h + 2 * seq * h * h + 4 * seq * h * f
    dense = load_run_config(None, tiny + ["model.sparse_prediction=false"])
    assert model_flops_per_sample(dense) == 3 * (2 * layer + 2 * seq * h * (h + vocab))
    sparse = load_run_config(None, tiny)                           # 15% of 20 positions: 3 predicted
    assert model_flops_per_sample(sparse) == 3 * (2 * layer + 2 * 3 * h * (h + vocab))
    thirty = load_run_config(None, tiny + ["masking.bert_mask_prob=0.3"])
    assert model_flops_per_sample(thirty) == 3 * (2 * layer + 2 * 6 * h * (h + vocab))


@pytest.mark.parametrize("seq, hidden", [(512, 768), (128, 256)])
def test_half_masking_halves_encoder_cost_per_view(seq, hidden):
    """At r=0.5 one view's encoder costs about half of BERT's (a bit less: attention is quadratic)."""
    args = [f"data.seq_length={seq}", f"model.hidden_size={hidden}", "model.num_attention_heads=4",
            "model.max_position_embeddings=512"]
    cross, bert = load_run_config(None, args), load_run_config(None, args + ["model.arch=bert"])
    ratio = encoder_forward_flops(cross, seq // 2) / encoder_forward_flops(bert, seq)
    assert 0.45 < ratio <= 0.5
    assert model_flops_per_sample(cross) > 0 and model_flops_per_sample(bert) > 0


def test_modern_mlm_counts_the_geglu_fc1_twice_as_wide():
    """GeGLU: fc1 projects to 2*ffn (gate and up), fc2 back from ffn: 6*s*h*ffn per layer instead of 4."""
    cfg = load_run_config(None, TINY + ["model.arch=mlm", "model.encoder=modern", "model.sparse_prediction=false"])
    h, f, seq, vocab = 8, 32, 4, 128
    layer = 2 * seq * h * 3 * h + 4 * seq * seq * h + 2 * seq * h * h + 2 * seq * h * 2 * f + 2 * seq * f * h
    assert model_flops_per_sample(cfg) == 3 * (2 * layer + 2 * seq * h * (h + vocab))



def test_narrow_decoder_matches_hand_count():
    """Decoder width d=4 under an h=8 encoder: cross-attention K/V project from h, the head's dense d -> h."""
    cfg = load_run_config(None, TINY + ["model.decoder_hidden_size=4", "model.decoder_num_attention_heads=2"])
    h, d, f, df, lv, t, vocab = 8, 4, 32, 16, 2, 2, 128
    enc_layer = (2 * lv * h * 3 * h) + (2 * lv * lv * h) * 2 + (2 * lv * h * h) + (2 * lv * h * f) * 2
    self_attn = (2 * t * d * 3 * d) + (2 * t * t * d) * 2 + (2 * t * d * d)
    cross_attn = (2 * t * d * d) + (2 * lv * h * 2 * d) + (2 * t * lv * d) * 2 + (2 * t * d * d)
    dec_layer = self_attn + cross_attn + (2 * t * d * df) * 2
    head = 2 * t * d * h + 2 * t * h * vocab
    assert decoder_forward_flops(cfg, t, lv) == dec_layer
    assert model_flops_per_sample(cfg) == 3 * 2 * (2 * enc_layer + dec_layer + head)


def test_local_layers_count_only_their_window():
    """MLM-modern at L=8192, window 128, every 3rd layer global: local layers score 129 keys per query."""
    args = ["model.arch=mlm", "model.encoder=modern", "data.seq_length=8192", "model.max_position_embeddings=8192",
            "model.hidden_size=64", "model.num_attention_heads=2", "model.num_layers=3", "model.decoder_num_layers=0"]
    windowed = load_run_config(None, args + ["model.local_attention=128", "model.global_attn_every_n_layers=3"])
    dense = load_run_config(None, args)
    seq, h = 8192, 64
    saved = 2 * (4 * seq * seq * h - 4 * seq * 129 * h)          # layers 1 and 2 are local
    assert encoder_forward_flops(dense, seq) - encoder_forward_flops(windowed, seq) == pytest.approx(saved)
    crossbert = args[1:-1] + ["model.decoder_num_layers=1"]
    cross = load_run_config(None, crossbert + ["model.local_attention=128", "model.global_attn_every_n_layers=3"])
    assert encoder_forward_flops(cross, 4096) < encoder_forward_flops(load_run_config(None, crossbert), 4096)
