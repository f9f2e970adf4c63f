"""Frozen text encoders for evaluation: resolve a model reference and embed texts.

One code path for every model: a native megatron-crossbert checkpoint is first exported to a
Hugging Face directory in its encoder's default format (``megatron_crossbert.convert.export_to_hf``, cached by
checkpoint identity), then everything is loaded with ``transformers.AutoModel``/``AutoTokenizer``.
Accepted references (``MODEL_FORMS``, tried in this order; the first that fits wins, and ``ResolvedModel`` says
which and the file that decided it):
- a native checkpoint root (has ``latest``) or ``iter_*`` directory (has ``run_config.json``);
- a sentence-transformers directory (has ``modules.json``; its Transformer module at the top or in a sub-folder
  such as ``0_Transformer/``; ``recipe.py`` reads its pooling);
- a local HF encoder directory (has ``config.json``);
- a hub name (only when online; with ``HF_HUB_OFFLINE=1`` transformers fails with its own message).

Embeddings are pooled per layer: ``mean`` over attended tokens or the ``cls`` (first) token, for
the last layer or for every hidden state (embedding output + each layer; ``layers="all"``).
"""

from __future__ import annotations

import hashlib
import json
import os
import typing
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Sequence

import numpy as np
import torch

from megatron_crossbert.evaluation.encoding import (EncodingOptions, pick_hidden_state, untie_last_hidden_state,
                                                 visible_mask)
from megatron_crossbert.progress import progress_bar

if TYPE_CHECKING:
    from megatron_crossbert.checkpoint.verify import VerifiedCheckpoint

ModelForm = Literal["native-checkpoint", "sentence-transformers", "hf-dir", "hub"]
MODEL_FORMS: tuple[ModelForm, ...] = typing.get_args(ModelForm)
"""The forms a model reference can take, in the order ``resolve_model`` tries them."""
Pooling = Literal["mean", "cls"]
Layers = Literal["last", "all"]
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


@dataclass(frozen=True)
class ResolvedModel:
    """An HF-loadable location plus a stable identity string (used in feature-cache keys)."""

    hf_path: str
    identity: str
    native_checkpoint: str | None = None
    recipe_dir: str | None = None
    """The directory whose sentence-transformers config is the embedding recipe (``recipe.py``);
    the HF dir itself unless that sits in a sentence-transformers sub-folder."""
    form: ModelForm = "hub"
    """Which of ``MODEL_FORMS`` the reference was taken as."""
    why: str = ""
    """The file that decided ``form`` (or why the reference is a hub name)."""

    @property
    def model_dir(self) -> str:
        """Where to read the embedding recipe from."""
        return self.recipe_dir or self.hf_path


def native_marker(path: str | Path) -> Path | None:
    """The file that makes ``path`` a native checkpoint (an iteration's ``run_config.json``, a root's
    ``latest``), or None."""
    from megatron_crossbert.checkpoint.directories import LATEST_FILE, RUN_CONFIG_FILE

    path = Path(path)
    return next((path / name for name in (RUN_CONFIG_FILE, LATEST_FILE) if (path / name).is_file()), None)


def is_native_checkpoint(path: str | Path) -> bool:
    return native_marker(path) is not None


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                    "vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model")
MODEL_FILES = ("config.json", *_WEIGHT_FILES, *_TOKENIZER_FILES)
"""The files of an HF model directory its features depend on: config, weights and tokenizer."""


def _short(digest: str) -> str:
    """The first 16 hex digits of a ``content_identity`` digest (what identity strings show)."""
    return digest.split(":")[-1][:16]


def hf_dir_identity(path: str | Path) -> str:
    """Content hash of the model's config, weights and tokenizer (``content_identity``), never its path: a
    rewritten model never reuses stale features or runs, and the same model copied elsewhere is the same model."""
    from megatron_crossbert.content_identity import files_identity

    digest = files_identity((name, Path(path) / name) for name in MODEL_FILES)
    return f"hf-dir:{_short(digest)}"


def _native_digest(ckpt: Path) -> str:
    """The checkpoint's content: its checksum record (a content hash of every file) and run config; a checkpoint
    saved before records has its files' names, sizes and modification times instead (a copy of one is then
    another model: a stale export is worse than a second one). Never its path."""
    from megatron_crossbert.checkpoint.checksums import CHECKSUMS_FILE
    from megatron_crossbert.checkpoint.directories import RUN_CONFIG_FILE
    from megatron_crossbert.content_identity import files_identity

    if (ckpt / CHECKSUMS_FILE).is_file():
        return files_identity([(name, ckpt / name) for name in (CHECKSUMS_FILE, RUN_CONFIG_FILE)])
    digest = hashlib.sha256((ckpt / RUN_CONFIG_FILE).read_bytes())
    for item in sorted(ckpt.rglob("*")):
        if item.is_file():
            stat = item.stat()
            digest.update(f"{item.relative_to(ckpt)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()


def native_checkpoint_identity(source: VerifiedCheckpoint) -> str:
    """The iteration's name and its content digest (``_native_digest``); the same checkpoint copied elsewhere
    has the same identity."""
    ckpt = source.directory.resolve()
    return f"native:{ckpt.name}:{_short(_native_digest(ckpt))}"


def tokenizer_identity(tokenizer_dir: str | Path) -> str:
    """Content hash of a tokenizer directory's files (the ``tokenizer_dir`` a native export is made with)."""
    from megatron_crossbert.content_identity import files_identity

    return _short(files_identity((name, Path(tokenizer_dir) / name) for name in _TOKENIZER_FILES))


def export_schema() -> str:
    """The config fields this code writes into a native export (``crossbert_run_config.json``), as a short digest.

    An export is reused only by code with the same fields: a reader refuses keys it does not know, so code that
    added a field must not hand its export to an older process sharing the cache (its key already differs)."""
    from megatron_crossbert.config import RunConfig

    sections = {name: sorted(fields) for name, fields in RunConfig().to_dict().items()}
    return hashlib.sha256(json.dumps(sections, sort_keys=True).encode()).hexdigest()[:16]


def default_cache_dir() -> Path:
    """``$CROSSBERT_EVAL_CACHE`` or ``~/.cache/megatron_crossbert/eval``."""
    env = os.environ.get("CROSSBERT_EVAL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "megatron_crossbert" / "eval"


def export_native(checkpoint: str | Path, cache_dir: str | Path | None = None,
                  tokenizer_dir: str | Path | None = None, verify: str = "full") -> ResolvedModel:
    """Export a native checkpoint to an HF dir under the cache (reused when the checkpoint and the code's config
    fields, ``export_schema``, are unchanged).

    The checkpoint is opened once, its files checked against their recorded hashes (``verify``: full
    or off) even when the export is cached; its identity and the export both read that one resolution.
    """
    from megatron_crossbert.convert import export_to_hf
    from megatron_crossbert.convert.native import open_export_source

    source = open_export_source(checkpoint, verify)
    identity = native_checkpoint_identity(source)
    if tokenizer_dir is not None:
        identity += f":tok={tokenizer_identity(tokenizer_dir)}"
    folder = hashlib.sha256(f"{identity}:schema={export_schema()}".encode()).hexdigest()[:16]
    out_dir = Path(cache_dir or default_cache_dir()) / "hf_export" / folder
    if not (out_dir / "config.json").is_file():
        export_to_hf(source, out_dir, tokenizer_dir=tokenizer_dir, force=True)
    return ResolvedModel(hf_path=str(out_dir), identity=identity, native_checkpoint=str(checkpoint),
                         form="native-checkpoint", why=str(native_marker(checkpoint)))


def resolve_model(ref: str | Path, cache_dir: str | Path | None = None,
                  tokenizer_dir: str | Path | None = None, verify: str = "full") -> ResolvedModel:
    """Map a checkpoint / sentence-transformers or HF directory / hub name (``MODEL_FORMS``, in that order) to an
    HF-loadable path and an identity (``verify``: the checksum check of a native checkpoint, full or off)."""
    path = Path(ref)
    if is_native_checkpoint(path):
        return export_native(path, cache_dir, tokenizer_dir, verify)
    if path.is_dir():
        return resolve_local_dir(path)
    return ResolvedModel(hf_path=str(ref), identity=f"hub:{ref}", form="hub",
                         why=f"{ref} is no local directory, so a hub name")


def resolve_local_dir(path: Path) -> ResolvedModel:
    """A sentence-transformers directory (``modules.json``; its Transformer at the top or in a sub-folder) or an
    HF encoder directory (``config.json``); anything else is refused naming the directory."""
    from megatron_crossbert.evaluation.recipe import MODULES_FILE, transformer_subdir

    sub = None if (path / "config.json").is_file() else transformer_subdir(path)
    if sub is None and not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is neither a native checkpoint (run_config.json / latest) "
                                "nor a Hugging Face model directory (config.json)")
    hf_dir = sub or path
    if (path / MODULES_FILE).is_file():
        return ResolvedModel(hf_path=str(hf_dir), identity=hf_dir_identity(hf_dir), form="sentence-transformers",
                             recipe_dir=None if sub is None else str(path), why=str(path / MODULES_FILE))
    return ResolvedModel(hf_path=str(hf_dir), identity=hf_dir_identity(hf_dir), form="hf-dir",
                         why=str(path / "config.json"))


def pool_hidden(hidden: torch.Tensor, mask: torch.Tensor, pooling: Pooling) -> torch.Tensor:
    """[..., b, s, h] -> [..., b, h]: masked mean over tokens, or the first token."""
    if pooling == "cls":
        return hidden[..., 0, :]
    if pooling != "mean":
        raise ValueError(f"pooling must be 'mean' or 'cls', not {pooling!r}")
    weights = mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(-2) / weights.sum(-2).clamp(min=1.0)


class HFEncoder:
    """A frozen HF encoder that embeds text lists in length-sorted batches (fp32, eval mode, no grad)."""

    def __init__(self, model: ResolvedModel | str, *, device: str | None = None, max_len: int = 128,
                 batch_size: int = 32, encoding: EncodingOptions | None = None) -> None:
        from transformers import AutoModel, AutoTokenizer

        self.encoding = encoding or EncodingOptions()
        """How each text is encoded and which tensor is pooled (``evaluation.encoding``); part of ``identity``."""
        self.resolved = model if isinstance(model, ResolvedModel) else resolve_model(model)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.tokenizer = AutoTokenizer.from_pretrained(self.resolved.hf_path)
        self.model = AutoModel.from_pretrained(self.resolved.hf_path).to(self.device).eval()
        untie_last_hidden_state(self.model, self.encoding)
        self.max_len, self.batch_size = max_len, batch_size
        self.num_layers = int(self.model.config.num_hidden_layers)
        self.attention, self.attention_identity = None, ""

    def use_attention(self, folder: str) -> None:
        """Pool ``"attention"`` through the ``AttentionPooling`` module saved in ``folder``; its content joins
        the identity, so features pooled through it are cached apart from every other pooler's."""
        from megatron_crossbert.evaluation.attention_pooling import attention_identity, load_attention

        self.attention, self.attention_identity = load_attention(str(folder)), attention_identity(folder)

    @property
    def identity(self) -> str:
        return (self.resolved.identity + self.encoding.identity
                + (f"+{self.attention_identity}" if self.attention_identity else ""))

    def _pool(self, hidden: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
        if pooling != "attention":
            return pool_hidden(hidden, mask, pooling)
        if self.attention is None:
            raise ValueError(f"{self.resolved.hf_path}: attention pooling needs a saved AttentionPooling module")
        return self.attention.pool(hidden, mask)

    def _batch(self, texts: list[str]) -> dict[str, torch.Tensor]:
        """The padded, truncated batch of ``texts`` on the device, its attention mask the tokens the encoder sees
        (``self.encoding``'s visible subset, else every real token)."""
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_len, return_tensors="pt")
        batch = {k: v.to(self.device) for k, v in batch.items()}
        if self.encoding.visible_fraction < 1.0:
            batch["attention_mask"] = visible_mask(batch["attention_mask"], texts, self.encoding.visible_fraction,
                                                   self.encoding.seed)
        return batch

    def token_ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Each text's ids of the tokens ``token_states`` returns states of, in the same order."""
        out: list[np.ndarray] = []
        for start in range(0, len(texts), self.batch_size):
            batch = self._batch(list(texts[start:start + self.batch_size]))
            ids, mask = batch["input_ids"].cpu().numpy(), batch["attention_mask"].bool().cpu().numpy()
            out += [row[keep] for row, keep in zip(ids, mask)]
        return out

    @torch.inference_mode()
    def _forward(self, texts: list[str], all_layers: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The backbone's float hidden states ``[n_layers, b, s, h]`` of a padded batch, and its attention mask
        (the tokens the encoder saw: ``self.encoding``'s visible subset, else every real token)."""
        batch = self._batch(texts)
        options = self.encoding
        out = self.model(**batch, output_hidden_states=all_layers or options.hidden_state != "after_final_norm")
        if all_layers:
            hidden = torch.stack(out.hidden_states)
        else:
            hidden = pick_hidden_state(out, options.hidden_state, self.num_layers, self.resolved.hf_path).unsqueeze(0)
        return hidden.float(), batch["attention_mask"]

    @torch.inference_mode()
    def _embed_batch(self, texts: list[str], pooling: Pooling, layers: Layers) -> np.ndarray:
        if pooling == "cls" and self.encoding.visible_fraction < 1.0:
            raise ValueError(f"{self.resolved.hf_path}: cls pooling reads the first token, which a visible "
                             f"subset (visible_fraction={self.encoding.visible_fraction:g}) may hide; use mean")
        hidden, mask = self._forward(texts, all_layers=layers == "all")
        return self._pool(hidden, mask, pooling).cpu().numpy()

    @torch.inference_mode()
    def token_states(self, texts: Sequence[str], desc: str = "token states") -> list[np.ndarray]:
        """Each text's last-layer states of its real tokens, ``[len_i, h]`` float32 (no padding): what a pooler
        that weighs tokens (attention pooling) trains on."""
        out: list[np.ndarray] = []
        for start in progress_bar(range(0, len(texts), self.batch_size), desc=desc, leave=False):
            hidden, mask = self._forward(list(texts[start:start + self.batch_size]))
            hidden, mask = hidden[0].cpu().numpy(), mask.bool().cpu().numpy()
            out += [require_finite(h[m], f"{self.resolved.hf_path}: the token states of {desc}")
                    for h, m in zip(hidden, mask)]
        return out

    def embed(self, texts: Sequence[str], pooling: Pooling = "mean", layers: Layers = "last",
              desc: str = "embedding", progress: bool = True) -> np.ndarray:
        """``[n_layers, n, h]`` float32 (n_layers = 1 for ``last``, num_hidden_layers + 1 for ``all``)."""
        order = np.argsort([-len(t) for t in texts], kind="stable")
        chunks = []
        starts = range(0, len(texts), self.batch_size)
        for start in progress_bar(starts, desc=desc, disable=not progress, leave=False):
            chunk = [texts[i] for i in order[start:start + self.batch_size]]
            chunks.append(self._embed_batch(chunk, pooling, layers))
        if not chunks:
            n_layers = 1 if layers == "last" else self.num_layers + 1
            return np.zeros((n_layers, 0, int(self.model.config.hidden_size)), np.float32)
        stacked = np.concatenate(chunks, axis=1).astype(np.float32)
        result = np.empty_like(stacked)
        result[:, order] = stacked
        return require_finite(result, f"{self.resolved.hf_path}: the features of {desc}")


def require_finite(features: np.ndarray, what: str) -> np.ndarray:
    """``features`` when every value is finite; else ValueError naming them (a diverged or damaged model's NaN
    would otherwise surface as a probe's or mteb's own error, far from its cause)."""
    bad = int(np.size(features) - np.count_nonzero(np.isfinite(features)))
    if bad:
        raise ValueError(f"{what}: {bad} of {np.size(features)} values are NaN or infinite (the model's outputs "
                         "are not finite: a diverged or damaged checkpoint?)")
    return features


def model_card(resolved: ResolvedModel) -> dict:
    """A JSON-able description of the evaluated model for result files."""
    return asdict(resolved)
