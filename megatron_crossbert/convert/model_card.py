"""The README.md model card of an export: what the model is, how to load it, how it was trained.

Kept factual and short: the HF class and its attention backends, the training config embedded
verbatim (as YAML) so results can be traced to a run, and the known deviations of the HF copy (zero
token types, untrained pooler, discarded reconstruction decoder, omitted MLM head) stated instead of
left for users to discover. What depends on the target comes from the format, what depends on the
model from its traits; nothing here branches on a name.
"""

from __future__ import annotations

import yaml

from megatron_crossbert.config import RunConfig
from megatron_crossbert.convert.formats.interface import HfFormat, model_traits


def _notes(run_cfg: RunConfig, fmt: HfFormat, with_mlm_head: bool) -> list[str]:
    model, traits = run_cfg.model, model_traits(run_cfg.model)
    notes = ["Token-type embeddings are all zero (the model has none); `token_type_ids` change nothing.",
             *fmt.card_notes(model)]
    if with_mlm_head:
        notes.append(f"`AutoModel` loads the encoder from this MLM checkpoint (`{fmt.mlm_class}`); its load "
                     "report lists the unused head and an untrained pooler, neither affects hidden states.")
    else:
        notes.append("`pooler.*` is not trained (zeros); use mean pooling or `last_hidden_state`.")
    notes.append(f"Embedding rows beyond the tokenizer's vocabulary (vocab_size={model.vocab_size}) are "
                 "alignment padding and were never trained as inputs.")
    if traits.has_reconstruction_decoder:
        notes.append("The reconstruction decoder and its LM head are pretraining-only and are not "
                     "included: this is the encoder (the representation branch).")
    elif traits.encoder_mlm_head and not with_mlm_head:
        notes.append(f"The MLM head is omitted: it has no exact `{fmt.name}` target for this config "
                     "(megatron's head uses exact GELU; see the format's documentation).")
    return notes


def model_card(run_cfg: RunConfig, fmt: HfFormat, with_mlm_head: bool, source: str) -> str:
    """Markdown with a Hugging Face metadata header."""
    model = run_cfg.model
    hf_class = fmt.mlm_class if with_mlm_head else fmt.base_class
    backends = ", ".join(f"`{name}`" for name in fmt.attention_backends)
    lines = [
        "---", "library_name: transformers", f"pipeline_tag: {'fill-mask' if with_mlm_head else 'feature-extraction'}",
        f"tags: [{fmt.model_type}, sentence-transformers, megatron-crossbert]", "---", "",
        f"# {model_traits(model).description}", "",
        f"Exported by `crossbert-convert-hf` (format `{fmt.name}`) from `{source}`.", "",
        f"- Architecture: `{hf_class}` ({model.num_layers} layers, hidden {model.hidden_size}, "
        f"{model.num_attention_heads} heads, FFN {model.ffn}, LayerNorm eps {model.layernorm_epsilon}, "
        f"up to {model.max_position_embeddings} positions).",
        f"- Attention backends (`attn_implementation`): {backends}.", "",
        "## Usage", "", "```python",
        "from transformers import AutoModel, AutoTokenizer",
        "tok = AutoTokenizer.from_pretrained(PATH)",
        f"model = AutoModel.from_pretrained(PATH, attn_implementation={fmt.attention_backends[0]!r})",
        "# last_hidden_state = the native encoder output",
        "from sentence_transformers import SentenceTransformer",
        "SentenceTransformer(PATH).encode(['a sentence'])  # mean pooling", "```", "",
        "## Notes", "", *[f"- {note}" for note in _notes(run_cfg, fmt, with_mlm_head)], "",
        "## Training configuration", "", "```yaml",
        yaml.safe_dump(run_cfg.to_dict(), sort_keys=True).rstrip(), "```", "",
    ]
    return "\n".join(lines)
