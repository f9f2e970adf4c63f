"""The README.md model card of an export: what the model is, how to load it, how it was trained.

Kept factual and short: the training config is embedded verbatim (as YAML) so results can be traced
to a run, and the known deviations of the HF copy (zero token types, untrained pooler, discarded
CrossBERT decoder, omitted MLM head) are stated instead of left for users to discover.
"""

from __future__ import annotations

import yaml

from megatron_crossbert.config import RunConfig


def _notes(run_cfg: RunConfig, with_mlm_head: bool) -> list[str]:
    model = run_cfg.model
    notes = ["Token-type embeddings are all zero (the model has none); `token_type_ids` change nothing.",
             "Use right padding: positions are absolute (0..s-1), as in pretraining."]
    if with_mlm_head:
        notes.append("`AutoModel` loads the encoder from this MLM checkpoint; its load report lists the "
                     "unused `cls.*` head and an untrained pooler, neither of which affects hidden states.")
    else:
        notes.append("`pooler.*` is not trained (zeros); use mean pooling or `last_hidden_state`.")
    notes.append(f"Embedding rows beyond the tokenizer's vocabulary (vocab_size={model.vocab_size}) are "
                 "alignment padding and were never trained as inputs.")
    if model.arch == "crossbert":
        notes.append("CrossBERT's reconstruction decoder and its LM head are pretraining-only and are not "
                     "included: this is the encoder (the representation branch).")
    elif not with_mlm_head:
        notes.append("The MLM head is omitted: megatron's head uses exact GELU while HF's applies "
                     "`hidden_act` (tanh here, from bias-GELU fusion), so it has no exact HF target.")
    return notes


def model_card(run_cfg: RunConfig, with_mlm_head: bool, source: str) -> str:
    """Markdown with a Hugging Face metadata header."""
    model = run_cfg.model
    kind = "CrossBERT encoder" if model.arch == "crossbert" else "BERT baseline (megatron-core BertModel)"
    pipeline = "fill-mask" if with_mlm_head else "feature-extraction"
    lines = [
        "---", "library_name: transformers", f"pipeline_tag: {pipeline}",
        "tags: [megatron-bert, sentence-transformers, megatron-crossbert]", "---", "",
        f"# {kind}", "",
        f"Exported by `crossbert-convert-hf` from `{source}`. Architecture: "
        f"`{'MegatronBertForMaskedLM' if with_mlm_head else 'MegatronBertModel'}` "
        f"({model.num_layers} layers, hidden {model.hidden_size}, {model.num_attention_heads} heads, "
        f"FFN {model.ffn}, LayerNorm eps {model.layernorm_epsilon}, up to {model.max_position_embeddings} positions).",
        "", "## Usage", "", "```python",
        "from transformers import AutoModel, AutoTokenizer",
        "tok = AutoTokenizer.from_pretrained(PATH)",
        "model = AutoModel.from_pretrained(PATH)  # last_hidden_state = the native encoder output",
        "from sentence_transformers import SentenceTransformer",
        "SentenceTransformer(PATH).encode(['a sentence'])  # mean pooling", "```", "",
        "## Notes", "", *[f"- {note}" for note in _notes(run_cfg, with_mlm_head)], "",
        "## Training configuration", "", "```yaml",
        yaml.safe_dump(run_cfg.to_dict(), sort_keys=True).rstrip(), "```", "",
    ]
    return "\n".join(lines)
