"""One idea of an embedding model: what every evaluation of an encoder reads it through.

An ``Embedder`` resolves, in one place and once per run:

- the model: ``encoders.resolve_model`` takes each form a reference can have (``encoders.MODEL_FORMS``: a native
  checkpoint, verified and exported to HF; a sentence-transformers directory; an HF directory; a hub name), the
  first that fits winning;
- its embedding recipe: ``recipe.resolve_recipe`` (pooling by ``recipe.choose_pooling``'s one rule, the modules
  after it, the token count within the model's own limit, whitening);
- a trained pooler: the ``AttentionPooling`` or ``Dense`` modules the recipe names (``attention_pooling.py``,
  ``dense_head.py``);
- the feature cache (``feature_cache.FeatureCache``) and the in-process memo its variants share;
- the identity features are keyed by (the model's content, how texts are encoded, an attention module's content).

``crossbert-probe``, ``crossbert-mteb``, ``crossbert-pooler`` and ``crossbert-finetune`` take one rather than
resolving on their own, and each writes what was resolved (``EmbedderRecord``) as ``embedder.json`` beside its
results: which form won and from which path, which pooling source won and why, the identity. Fine-tuning trains
the whole encoder and reads no pooled features: its embedder resolves the model alone (``pooled=False``).
"""

from __future__ import annotations

import copy
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from megatron_crossbert.evaluation.encoders import HFEncoder, Layers, ResolvedModel, model_card, resolve_model
from megatron_crossbert.evaluation.encoding import EncodingOptions
from megatron_crossbert.evaluation.feature_cache import FeatureCache, texts_digest
from megatron_crossbert.evaluation.recipe import (EmbeddingRecipe, PoolingChoice, describe, model_token_limit,
                                                  resolve_recipe)

logger = logging.getLogger(__name__)
EMBEDDER_JSON = "embedder.json"


@dataclass(frozen=True)
class EmbedderOptions:
    """What a run asks of its embedding model: the model flags; a None leaves the choice to the model's own recipe,
    else to the default (``recipe.resolve_recipe``)."""

    model: str
    """The reference: a native checkpoint, a sentence-transformers or HF directory, or a hub name."""
    cache_dir: str | None = None
    """Feature and export cache; None: no feature cache (a native export still goes to the default cache)."""
    tokenizer_dir: str | None = None
    """Native checkpoints: the tokenizer to export with (default: the run config's)."""
    verify: str = "full"
    """Native checkpoints: the checksum check (full or off)."""
    device: str | None = None
    """torch device; None: cuda if available, else cpu."""
    batch_size: int = 32
    """Texts per forward pass."""
    pooling: str | None = None
    """``--pooling`` (``recipe.choose_pooling``: a flag wins over the model's modules and the default)."""
    normalize: bool | None = None
    """``--normalize``/``--no-normalize``; None: the model's ``Normalize`` module, else off."""
    max_len: int | None = None
    """``--max-len``: refused above the model's own limit."""
    default_max_len: int | None = None
    """The run's own default token count (``crossbert-probe``'s 128); None: the model's recipe, else 256."""
    whiten: bool | None = None
    """``--whiten``/``--no-whiten``; None: the architecture's default."""
    encoding: EncodingOptions = field(default_factory=EncodingOptions)
    """How each text is encoded and which tensor is pooled (``evaluation.encoding``)."""
    pooled: bool = True
    """False: the run reads no pooled features (fine-tuning), so no recipe is resolved and no encoder loaded."""


@dataclass
class EncodeTiming:
    """Texts run through the model (cache misses) and the seconds that took; one per embedder and its variants."""

    texts: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0

    def reset(self) -> None:
        self.texts, self.wall_s, self.cpu_s = 0, 0.0, 0.0

    def as_dict(self) -> dict:
        """The counts since ``reset``, and the rates."""
        return {"texts_encoded": self.texts, "encode_wall_s": round(self.wall_s, 2),
                "encode_cpu_s": round(self.cpu_s, 2),
                "sentences_per_s": self.texts / self.wall_s if self.wall_s > 0 else None,
                "sentences_per_cpu_s": self.texts / self.cpu_s if self.cpu_s > 0 else None}


def embed_unique(embed: Callable[[list[str]], np.ndarray], texts: Sequence[str]) -> np.ndarray:
    """``embed`` each distinct text once, then scatter the rows back to ``texts``' order."""
    unique, inverse = np.unique(np.asarray(list(texts), dtype=object), return_inverse=True)
    return embed(list(unique))[inverse.reshape(-1)]


class Embedder:
    """A resolved model, its recipe, the HF encoder that runs it (loaded at first use) and its feature cache."""

    def __init__(self, options: EmbedderOptions, model: ResolvedModel, recipe: EmbeddingRecipe | None,
                 name: str | None = None) -> None:
        self.options, self.model, self.recipe = options, model, recipe
        self.cache = FeatureCache(options.cache_dir)
        self.memo: dict[str, np.ndarray] = {}
        """Pooled features of this process by cache key, shared with ``variant``s: a second readout of the same
        backbone (whitened, or through a trained pooler) encodes nothing, disk cache or not."""
        self.timing = EncodeTiming()
        """The encoding time so far, shared with the variants."""
        source = model.native_checkpoint or model.model_dir
        self.name = name or f"megatron-crossbert/{Path(source).name or 'model'}"
        self._encoder: HFEncoder | None = None

    @classmethod
    def resolve(cls, options: EmbedderOptions) -> "Embedder":
        """The model once (a native checkpoint verified and exported), then its recipe within its own token limit."""
        model = resolve_model(options.model, options.cache_dir, options.tokenizer_dir, options.verify)
        if not options.pooled:
            return cls(options, model, None)
        recipe = resolve_recipe(model.model_dir, pooling=options.pooling, normalize=options.normalize,
                                max_len=options.max_len, default_max_len=options.default_max_len,
                                limit=model_token_limit(model.hf_path), whiten=options.whiten)
        logger.info(describe(recipe))
        return cls(options, model, recipe)

    @property
    def readout(self) -> EmbeddingRecipe:
        """The recipe; refused for an embedder resolved without one (fine-tuning reads no pooled features)."""
        if self.recipe is None:
            raise ValueError(f"{self.model.hf_path}: resolved without an embedding recipe (pooled=False)")
        return self.recipe

    @property
    def encoder(self) -> HFEncoder:
        """The frozen HF encoder, loaded at first use, pooling through a trained ``AttentionPooling`` when the
        recipe names one."""
        if self._encoder is None:
            options = self.options
            encoder = HFEncoder(self.model, device=options.device, max_len=self.readout.tokens,
                                batch_size=options.batch_size, encoding=options.encoding)
            if self.readout.attention:
                encoder.use_attention(self.readout.attention)
            self._encoder = encoder
        return self._encoder

    @property
    def identity(self) -> str:
        """What features and results are keyed by: the model's content, how texts are encoded and a trained
        attention's content (``HFEncoder.identity``); the model's alone without a recipe."""
        return self.encoder.identity if self.recipe is not None else self.model.identity

    def cache_key(self, texts: Sequence[str], **parts: object) -> str:
        """The feature-cache key of ``texts``: the identity, pooling, token count, the texts' digest and ``parts``
        (whatever else the caller's features depend on: task, split, side, layers)."""
        return self.cache.key(model=self.identity, pooling=self.readout.pooling, max_len=self.encoder.max_len,
                              texts=texts_digest(texts), **parts)

    def encode(self, texts: list[str], layers: Layers = "last", desc: str = "embedding") -> np.ndarray:
        """Pooled backbone features ``[n_layers, n, h]`` of ``texts``, run through the model now (timed)."""
        wall, cpu = time.perf_counter(), time.process_time()
        out = self.encoder.embed(texts, pooling=self.readout.pooling, layers=layers, desc=desc)
        self.timing.texts += len(texts)
        self.timing.wall_s += time.perf_counter() - wall
        self.timing.cpu_s += time.process_time() - cpu
        return out

    def features(self, texts: list[str], parts: dict, *, layers: Layers = "last", desc: str = "embedding"
                 ) -> np.ndarray:
        """Pooled backbone features ``[n_layers, n, h]`` of ``texts``, from the feature cache when present."""
        return self.cache.get_or_compute(self.cache_key(texts, **parts), lambda: self.encode(texts, layers, desc))

    def sentences(self, texts: list[str], *, task: str, split: str) -> np.ndarray:
        """Last-layer pooled features ``[n, h]`` (before any head), each distinct text encoded once, from the memo
        or the cache when present: what MTEB scores and a pooler trains on (keyed ``kind="mteb"``, as MTEB's features
        always were, so a cache filled before stays valid)."""
        key = self.cache_key(texts, kind="mteb", task=task, split=split)
        if key not in self.memo:
            self.memo[key] = self.cache.get_or_compute(key, lambda: embed_unique(
                lambda unique: self.encode(unique, "last", f"{task}/{split}")[0], texts))
        return self.memo[key]

    def token_states(self, texts: Sequence[str], desc: str = "token states") -> list[np.ndarray]:
        """Each text's last-layer states of its real tokens (``HFEncoder.token_states``)."""
        return self.encoder.token_states(texts, desc=desc)

    def variant(self, recipe: EmbeddingRecipe, name: str | None = None) -> "Embedder":
        """The same backbone, encoder, caches and timing read through another recipe (whitening on or off, a
        pooler's Dense modules); its pooling and token count must be this one's, as the features are."""
        mine = self.readout
        if (recipe.pooling, recipe.tokens, recipe.attention) != (mine.pooling, mine.tokens, mine.attention):
            raise ValueError(f"a variant reads the same pooled features: pooling {recipe.pooling} / "
                             f"{recipe.tokens} tokens differ from {mine.pooling} / {mine.tokens}")
        self.encoder  # noqa: B018 -- loaded before the copy, so the variants share one
        twin = copy.copy(self)
        twin.recipe, twin.name = recipe, name or self.name
        return twin


def embedder_of(holder) -> Embedder:
    """``holder`` itself, or the ``Embedder`` it reads through (an mteb encoder's ``embedder``)."""
    return holder if isinstance(holder, Embedder) else holder.embedder


@dataclass(frozen=True)
class EmbedderRecord:
    """What an ``Embedder`` resolved, as ``embedder.json`` holds it beside a run's results."""

    given: str
    """The model reference as the run was given it."""
    model: dict
    """``encoders.ResolvedModel``: the form that won (``form``), the file that decided it (``why``), the HF path
    loaded, the native checkpoint and the model's own identity."""
    pooling: dict | None
    """``{pooling, source, why}``: the pooling used and the source that won (``recipe.choose_pooling``); None
    when the run reads no pooled features."""
    recipe: dict | None
    """The whole ``EmbeddingRecipe`` (trained Dense / AttentionPooling modules, normalisation, tokens, whitening)."""
    feature_cache: str | None
    """The feature cache directory, or None (off, or no pooled features read)."""
    identity: str
    """What the run's features and results are keyed by."""
    name: str
    """The model's name in result files (mteb's ``ModelMeta.name``)."""

    @classmethod
    def of(cls, embedder: Embedder) -> "EmbedderRecord":
        recipe = embedder.recipe
        pooling = None
        if recipe is not None:
            choice = PoolingChoice(recipe.pooling, recipe.pooling_source, recipe.attention)
            pooling = {"pooling": choice.pooling, "source": choice.source, "why": choice.why}
        cache = embedder.cache.root if recipe is not None else None
        return cls(given=str(embedder.options.model), model=model_card(embedder.model), pooling=pooling,
                   recipe=None if recipe is None else asdict(recipe), identity=embedder.identity,
                   feature_cache=None if cache is None else str(cache), name=embedder.name)


def write_embedder_json(embedder: Embedder, out_dir: str | Path) -> Path:
    """``out_dir/embedder.json``: what ``embedder`` resolved (``EmbedderRecord``), written whole or not at all; a
    full disk is one line naming the file."""
    from megatron_crossbert.fsutil import atomic_write_text
    from megatron_crossbert.outputs import writing

    path = Path(out_dir) / EMBEDDER_JSON
    with writing(path, "the embedder record"):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(asdict(EmbedderRecord.of(embedder)), indent=2) + "\n")
    return path
