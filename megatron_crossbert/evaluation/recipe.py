"""The embedding recipe of a model directory: pooling, L2 normalisation and max tokens.

A sentence-transformers model is more than its transformer. all-MiniLM-L6-v2's ``modules.json`` ends
with a ``Normalize`` module, so the embeddings MTEB scored were unit vectors. Cosine scores (STS) do
not care, but mteb's classification fits a LogisticRegression (C=1) on the raw embeddings, and their
norm sets how strong that penalty is: un-normalised MiniLM embeddings score 82.96 on Banking77 where
MTEB published 80.04. So when a directory carries a sentence-transformers config, that config is the
recipe; flags override it; only with neither do the defaults (mean pooling, no normalisation) apply.

Modules ``AutoModel`` plus pooling cannot reproduce (Dense, max pooling, ...) are refused, naming the
file, rather than scored as something the model is not. Our own exports write Transformer + mean
Pooling without Normalize (``convert/artifacts.py``), so they are scored as ``SentenceTransformer(dir)``
and therefore MTEB would score them.

The token count is capped by the model itself (``model_token_limit``: its position table in ``config.json``,
less RoBERTa's ``pad_token_id + 1`` offset, and its tokenizer's ``model_max_length``): a default above it is
lowered with one log line, an explicit ``--max-len`` above it is refused naming the file (``fit_max_len``).
A longer text would otherwise index past the position table and crash mid-run. ``crossbert-probe`` uses
the same rule with its own default.

On top of pooling sits ``whiten`` (``whitening.py``): PCA whitening of the pooled features. Its default is the
architecture's (``arch.ArchSpec.whiten_frozen_features``, on for the project's architectures), read
from the run config our exports carry (``crossbert_run_config.json``); any other model defaults to off;
``--whiten`` / ``--no-whiten`` override it.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

MODULES_FILE = "modules.json"
_POOLING_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}
POOLINGS = ("mean", "cls", "attention")
"""Sentence poolings a recipe can name; ``attention`` only through a saved ``AttentionPooling`` module."""
ATTENTION_TYPES = ("megatron_crossbert.evaluation.attention_pooling.AttentionPooling",
                   "megatron_crossbert.evaluation.pooler.attention.AttentionPooling")
"""``modules.json`` types of this project's attention pooling: where the class lives, and where directories saved
before it moved name it (another package's class of that name is refused)."""
DEFAULT_MAX_LEN = 256
"""Max tokens for a model without a sentence-transformers config (MiniLM's own value)."""
PROBE_MAX_LEN = 128
"""``crossbert-probe``'s default tokens per text (frozen linear probes; cheaper than MTEB's 256)."""


@dataclass(frozen=True)
class EmbeddingRecipe:
    """How hidden states become one sentence vector."""

    pooling: str = "mean"
    """``mean`` over attended tokens, the ``cls`` (first) token, or ``attention`` (a trained
    ``AttentionPooling`` module, ``evaluation/pooler/attention.py``, saved in ``attention``)."""
    normalize: bool = False
    """L2-normalise each sentence vector (sentence-transformers' ``Normalize`` module)."""
    max_len: int | None = None
    """Token limit per text; None: ``DEFAULT_MAX_LEN``."""
    source: str = "default"
    """Where the recipe came from (``default``, the ``modules.json`` path, ``flags over ...``), for reports."""
    pooling_source: str = "default"
    """Which source gave ``pooling`` (``choose_pooling``): ``flag``, the ``modules.json`` path, or ``default``."""
    whiten: bool = False
    """PCA-whiten the pooled features (``whitening.py``), fitted on unlabelled features of the task."""
    whiten_source: str = "default"
    """Why ``whiten`` has its value: ``architecture <name>``, ``flag`` or ``default``, for logs and reports."""
    dense: tuple[str, ...] = ()
    """sentence-transformers ``Dense`` module folders applied in order to the pooled vector (a pooler trained on
    a frozen backbone, ``evaluation/pooler``), before whitening and the L2 norm."""
    attention: str | None = None
    """The ``AttentionPooling`` module folder when ``pooling`` is ``attention``, else None."""

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise ValueError(f"EmbeddingRecipe.pooling must be one of {POOLINGS}, not {self.pooling!r}")
        if (self.pooling == "attention") != (self.attention is not None):
            raise ValueError("EmbeddingRecipe: attention pooling needs its module folder (and only it has one)")
        if self.max_len is not None and self.max_len < 1:
            raise ValueError(f"EmbeddingRecipe.max_len must be positive, not {self.max_len}")

    @property
    def tokens(self) -> int:
        """The token limit to encode with."""
        return self.max_len or DEFAULT_MAX_LEN


@dataclass(frozen=True)
class _Module:
    """One ``modules.json`` entry: its class name and the folder it loads from (checked by :func:`_modules`)."""

    type: str
    folder: Path

    @property
    def kind(self) -> str:
        return _kind(self.type)


def _kind(module_type: object) -> str:
    return str(module_type).rsplit(".", 1)[-1]


def _module_folder(modules_file: Path, index: int, module: dict) -> Path:
    """The folder of entry ``index``: its ``path`` under the model folder, never outside it. An absolute path,
    a ``..`` that climbs out, or a folder that is a symlink to elsewhere is refused (sentence-transformers would
    load a config or weights the user never pointed at). Files inside the folder may be symlinks: the HF
    cache's ``snapshots/<rev>/1_Pooling/config.json -> ../../../blobs/<hash>``."""
    raw, root = module.get("path", ""), modules_file.parent
    if not isinstance(raw, str):
        raise ValueError(f"{modules_file}: entry {index} path {raw!r} is not a string")
    real, real_root = os.path.realpath(root / raw), os.path.realpath(root)
    inside = os.path.commonpath([real, real_root]) == real_root
    if os.path.isabs(raw) or os.path.normpath(raw).split(os.sep)[0] == os.pardir or not inside:
        kind = _kind(module.get("type", ""))
        raise ValueError(f"{modules_file}: entry {index} ({kind}) path {raw!r} resolves to {real}, outside the "
                         f"model folder {real_root}")
    return root / raw


def _modules(model_dir: Path) -> list[_Module] | None:
    """The entries of ``model_dir/modules.json`` with their folders, each inside ``model_dir``; None without it."""
    path = model_dir / MODULES_FILE
    if not path.is_file():
        return None
    modules = json.loads(path.read_text())
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ValueError(f"{path}: expected a list of module objects")
    return [_Module(str(m.get("type", "")), _module_folder(path, i, m)) for i, m in enumerate(modules)]


def _pooling_mode(config_file: Path) -> str:
    """The Pooling module's mode: sentence-transformers >= 5 writes ``"pooling_mode": "mean"``, older
    versions one ``pooling_mode_*`` boolean per mode."""
    config = json.loads(config_file.read_text())
    if "pooling_mode" in config:
        mode = config["pooling_mode"]
        if mode not in ("mean", "cls"):
            raise ValueError(f"{config_file}: pooling_mode {mode!r} is not supported (mean or cls)")
        return mode
    on = sorted(key for key, value in config.items() if key.startswith("pooling_mode_") and value is True)
    if len(on) != 1 or on[0] not in _POOLING_MODES:
        raise ValueError(f"{config_file}: pooling {on} is not supported (exactly one of mean or cls tokens)")
    return _POOLING_MODES[on[0]]


def transformer_subdir(model_dir: str | Path) -> Path | None:
    """The folder of a sentence-transformers dir's Transformer module when it is not the dir itself
    (older sentence-transformers saved it in ``0_Transformer/``), or None."""
    model_dir = Path(model_dir)
    for module in _modules(model_dir) or []:
        if module.kind == "Transformer" and module.folder != model_dir:
            return module.folder if (module.folder / "config.json").is_file() else None
    return None


def read_sentence_transformers_recipe(model_dir: str | Path) -> EmbeddingRecipe | None:
    """The recipe in ``model_dir/modules.json`` (its Pooling config, ``sentence_bert_config.json``), or None."""
    model_dir = Path(model_dir)
    modules = _modules(model_dir)
    if modules is None:
        return None
    pooling, normalize, dense, attention = "mean", False, [], None
    for module in modules:
        kind = module.kind
        if kind == "Pooling":
            pooling = _pooling_mode(module.folder / "config.json")
        elif module.type in ATTENTION_TYPES:
            pooling, attention = "attention", str(module.folder)
        elif kind == "Normalize":
            normalize = True
        elif kind == "Dense" and not normalize:
            dense.append(str(module.folder))
        elif kind != "Transformer":
            raise ValueError(f"{model_dir / MODULES_FILE}: module {kind!r} cannot be reproduced by "
                             "AutoModel + pooling; evaluate this model with sentence-transformers itself")
    source = str(model_dir / MODULES_FILE)
    return EmbeddingRecipe(pooling, normalize, _max_seq_length(model_dir, modules), source=source,
                           pooling_source=source, dense=tuple(dense), attention=attention)


def _max_seq_length(model_dir: Path, modules: list[_Module]) -> int | None:
    """``max_seq_length`` from ``sentence_bert_config.json``; sentence-transformers >= 5 no longer writes it
    there but keeps it as the tokenizer's ``model_max_length`` in the Transformer module's folder."""
    config = model_dir / "sentence_bert_config.json"
    if config.is_file() and "max_seq_length" in (settings := json.loads(config.read_text())):
        return settings["max_seq_length"]
    folder = next((m.folder for m in modules if m.kind == "Transformer"), model_dir)
    tokenizer_config = folder / "tokenizer_config.json"
    limit = json.loads(tokenizer_config.read_text()).get("model_max_length") if tokenizer_config.is_file() else None
    return int(limit) if isinstance(limit, (int, float)) and 0 < limit < UNBOUNDED_TOKENIZER else None


def exported_architecture(model_dir: str | Path | None) -> str | None:
    """The architecture named by the run config an export of ours carries, or None for any other model."""
    from megatron_crossbert.config import RunConfig
    from megatron_crossbert.convert.artifacts import RUN_CONFIG_COPY

    path = Path(model_dir) / RUN_CONFIG_COPY if model_dir else None
    return RunConfig.load_json(path).model.arch if path is not None and path.is_file() else None


def default_whitening(model_dir: str | Path | None) -> tuple[bool, str]:
    """Whether frozen features of the model in ``model_dir`` are whitened by default, and why."""
    from megatron_crossbert.arch import get_arch

    arch = exported_architecture(model_dir)
    if arch is None:
        return False, "default"
    return get_arch(arch).whiten_frozen_features, f"architecture {arch}"


@dataclass(frozen=True)
class PoolingChoice:
    """The pooling a run uses and the source that gave it (``choose_pooling``)."""

    pooling: str
    source: str
    """``flag``, the model's ``modules.json`` path, or ``default``."""
    attention: str | None = None
    """The ``AttentionPooling`` module folder when the choice is ``attention``."""

    @property
    def why(self) -> str:
        """One line for ``embedder.json``: why this source won."""
        if self.source == "flag":
            return "--pooling was given; a flag wins over the model's modules.json and the default"
        if self.source == "default":
            return "no --pooling flag and no sentence-transformers modules.json: mean pooling, the default"
        return f"no --pooling flag; the model's sentence-transformers modules name it ({self.source})"


def choose_pooling(flag: str | None, model: EmbeddingRecipe | None) -> PoolingChoice:
    """The one rule for where pooling comes from; the first source that says something wins:

    1. the flag (``--pooling``): the user asked, over anything the model says;
    2. the model's own sentence-transformers modules (``model``, read from ``modules.json``): its ``Pooling``
       mode, or a trained ``AttentionPooling`` module;
    3. ``mean``, the default for a model that says nothing.

    A flag other than ``attention`` drops the model's ``AttentionPooling`` module with its pooling."""
    if flag:
        attention = model.attention if model is not None and flag == "attention" else None
        return PoolingChoice(flag, "flag", attention)
    if model is not None:
        return PoolingChoice(model.pooling, model.source, model.attention)
    return PoolingChoice("mean", "default")


def resolve_recipe(model_dir: str | Path | None, *, pooling: str | None = None, normalize: bool | None = None,
                   max_len: int | None = None, limit: TokenLimit | None = None,
                   whiten: bool | None = None, default_max_len: int | None = None) -> EmbeddingRecipe:
    """Flags over the directory's sentence-transformers config over the defaults (mean, no norm, 256); pooling by
    ``choose_pooling``'s rule; the token count then fits the model's ``limit`` (``fit_max_len``: a default is
    capped, a flag above it refused), its default ``default_max_len`` when the run has its own (``crossbert-probe``),
    else the model's; ``whiten`` over the architecture's default (``default_whitening``)."""
    model = read_sentence_transformers_recipe(model_dir) if model_dir and Path(model_dir).is_dir() else None
    base = model or EmbeddingRecipe()
    overridden = any(value is not None for value in (pooling, normalize, max_len))
    whiten_default, whiten_source = default_whitening(model_dir)
    choice = choose_pooling(pooling, model)
    return EmbeddingRecipe(pooling=choice.pooling, attention=choice.attention, pooling_source=choice.source,
                           normalize=base.normalize if normalize is None else normalize,
                           max_len=fit_max_len(max_len, default_max_len or base.tokens, limit),
                           source=f"flags over {base.source}" if overridden else base.source,
                           whiten=whiten_default if whiten is None else whiten,
                           whiten_source=whiten_source if whiten is None else "flag", dense=base.dense)


ROBERTA_POSITIONS = ("roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "data2vec-text", "longformer",
                     "roberta-prelayernorm", "ibert", "luke", "mpnet")
"""HF ``model_type``s whose position ids start at ``pad_token_id + 1`` (RoBERTa's ``create_position_ids_from_
input_ids``): their position table holds ``max_position_embeddings - pad_token_id - 1`` tokens. Our
``xlmr-xl`` export is one (``convert/formats/xlmr_xl.py``)."""
UNBOUNDED_TOKENIZER = 10**6
"""A tokenizer ``model_max_length`` at or above this means "no limit" (transformers writes 1e30)."""


@dataclass(frozen=True)
class TokenLimit:
    """The most tokens one text may have for a model, and the file and field that say so."""

    tokens: int
    source: str
    """E.g. ``…/config.json (max_position_embeddings 66, positions from pad_token_id + 1)``."""


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def model_token_limit(hf_dir: str | Path) -> TokenLimit | None:
    """The model's own limit: its position table (``config.json``) and its tokenizer's ``model_max_length``
    (``tokenizer_config.json``), the smaller; None when the directory states neither (a hub name)."""
    hf_dir = Path(hf_dir)
    limits = []
    config = _json(hf_dir / "config.json")
    positions = config.get("max_position_embeddings")
    if isinstance(positions, int) and positions > 0:
        offset = int(config.get("pad_token_id") or 0) + 1 if config.get("model_type") in ROBERTA_POSITIONS else 0
        note = ", positions from pad_token_id + 1" if offset else ""
        limits.append(TokenLimit(positions - offset,
                                 f"{hf_dir / 'config.json'} (max_position_embeddings {positions}{note})"))
    tokenizer_max = _json(hf_dir / "tokenizer_config.json").get("model_max_length")
    if isinstance(tokenizer_max, (int, float)) and 0 < tokenizer_max < UNBOUNDED_TOKENIZER:
        limits.append(TokenLimit(int(tokenizer_max), f"{hf_dir / 'tokenizer_config.json'} (model_max_length)"))
    return min(limits, key=lambda limit: limit.tokens) if limits else None


def fit_max_len(requested: int | None, default: int, limit: TokenLimit | None, flag: str = "--max-len") -> int:
    """Tokens per text: ``requested`` (a flag) if the model takes that many, else refused in one line naming
    the file that says so; without a flag ``default``, capped at the model's limit (logged once)."""
    if requested is not None:
        if requested < 1:
            raise ValueError(f"{flag} must be >= 1, got {requested}")
        if limit is not None and requested > limit.tokens:
            raise ValueError(f"{flag} {requested}: the model takes at most {limit.tokens} tokens per text "
                             f"({limit.source})")
        return requested
    if limit is not None and default > limit.tokens:
        logger.info("max length %d tokens per text: the model's limit (%s); the default is %d",
                    limit.tokens, limit.source, default)
        return limit.tokens
    return default


def describe(recipe: EmbeddingRecipe) -> str:
    """One line for logs and reports: what the embeddings are and where each choice came from."""
    norm = "L2-normalised" if recipe.normalize else "not normalised"
    whiten = "PCA-whitened" if recipe.whiten else "not whitened"
    head = f" + {len(recipe.dense)} Dense" if recipe.dense else ""
    return (f"embedding recipe: {recipe.pooling} pooling{head}, {norm}, max {recipe.tokens} tokens (from {recipe.source}), "
            f"{whiten} ({recipe.whiten_source})")
