"""The project's tokenizer: one fast ``tokenizers`` backend behind a small, stable interface.

Every tool (preprocessing, datasets, export, probing) goes through :func:`load_tokenizer`, so the
ids in the ``.bin`` files, the ids the model trains on and the ids that
``transformers.AutoTokenizer.from_pretrained(dir)`` produces are the same by construction: all of
them come from the same ``tokenizer.json``.

A tokenizer *directory* (what ``crossbert-train-tokenizer`` writes and :meth:`Tokenizer.save`
produces) holds ``tokenizer.json`` + ``tokenizer_config.json`` (+ ``special_tokens_map.json``) and,
for sentencepiece-trained vocabularies, the original ``sentencepiece.model`` for reference. Any
Hugging Face fast-tokenizer directory (e.g. a BERT ``vocab.txt`` checkpoint) is accepted as input.
A training start reads its run's tokenizer through :func:`run_tokenizer`, once per process while the files
stay as they were: the tokenizer record check and the datasets' special ids share that one load.

``encode`` never adds special tokens: the dataset places [CLS]/[SEP] itself when it packs samples.
The saved ``tokenizer.json`` carries a ``[CLS] $A [SEP]`` post-processor for downstream users
(sentence-transformers, HF pipelines), which matches the packed layout's start of sequence.
"""

from __future__ import annotations

import functools
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import tokenizers
from tokenizers import AddedToken
from tokenizers.processors import TemplateProcessing

from megatron_crossbert.content_identity import SAMPLE_ABOVE, files_identity
from megatron_crossbert.data.tokenizers.spm import spm_to_tokenizers

SPECIAL_TOKENS: dict[str, str] = {
    "pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "eod": "[EOD]",
}
"""Role -> token text. Trained vocabularies put them first, in this order (ids 0..5)."""

_REQUIRED_ROLES = ("pad", "unk", "cls", "sep", "mask")
_EOD_FALLBACKS = ("[EOD]", "<|endoftext|>", "</s>")
SPM_MODEL_NAME = "sentencepiece.model"
NAME_FILES = ("special_tokens_map.json", "tokenizer_config.json")
"""Where a tokenizer directory names its special tokens, read in this order."""


@dataclass
class Tokenizer:
    """Fast tokenizer with the special-token ids the data pipeline needs.

    ``eod_id`` falls back to ``sep_id`` for vocabularies without an end-of-document token (e.g.
    stock BERT); the packing layout uses [SEP] between documents in any case.
    """

    backend: tokenizers.Tokenizer
    special_ids: dict[str, int]
    spm_model: Path | None = None

    def __post_init__(self) -> None:
        # Hub tokenizer.json files often carry padding/truncation (e.g. pad to 128): the data
        # pipeline needs the raw ids of whole documents.
        self.backend.no_padding()
        self.backend.no_truncation()

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    cls_id = property(lambda self: self.special_ids["cls"])
    sep_id = property(lambda self: self.special_ids["sep"])
    mask_id = property(lambda self: self.special_ids["mask"])
    pad_id = property(lambda self: self.special_ids["pad"])
    unk_id = property(lambda self: self.special_ids["unk"])
    eod_id = property(lambda self: self.special_ids["eod"])

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Batch encode (parallel inside the Rust backend when TOKENIZERS_PARALLELISM allows)."""
        return [enc.ids for enc in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def token_text(self, role: str) -> str:
        return self.backend.id_to_token(self.special_ids[role])

    def save(self, directory: str | Path) -> Path:
        """Write a directory that :func:`load_tokenizer` and ``AutoTokenizer`` both load."""
        from transformers import PreTrainedTokenizerFast  # heavy import, only needed to save

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        roles = {f"{role}_token": self.token_text(role) for role in _REQUIRED_ROLES}
        extra = [self.token_text("eod")] if self.eod_id not in {self.special_ids[r] for r in _REQUIRED_ROLES} else []
        hf = PreTrainedTokenizerFast(tokenizer_object=self.backend, **roles,
                                     additional_special_tokens=extra, model_max_length=int(1e30))
        hf.save_pretrained(str(out))
        _write_special_tokens_map(out, roles, extra)
        _portable_tokenizer_class(out / "tokenizer_config.json")
        if self.spm_model is not None and self.spm_model.resolve() != (out / SPM_MODEL_NAME).resolve():
            shutil.copyfile(self.spm_model, out / SPM_MODEL_NAME)
        return out


def _write_special_tokens_map(out: Path, roles: dict[str, str], extra: list[str]) -> None:
    """transformers 5 no longer writes this file; older readers (and humans) still look for it."""
    path = out / "special_tokens_map.json"
    if not path.exists():
        payload = dict(roles, additional_special_tokens=extra)
        path.write_text(json.dumps(payload, indent=2) + "\n")


def _portable_tokenizer_class(config_path: Path) -> None:
    """transformers 5 writes its internal class name; the generic fast class loads in 4.x and 5.x."""
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def add_bert_post_processor(backend: tokenizers.Tokenizer, cls_token: str, sep_token: str) -> None:
    """``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]`` when callers ask for special tokens."""
    cls_id, sep_id = backend.token_to_id(cls_token), backend.token_to_id(sep_token)
    backend.post_processor = TemplateProcessing(
        single=f"{cls_token} $A {sep_token}", pair=f"{cls_token} $A {sep_token} $B:1 {sep_token}:1",
        special_tokens=[(cls_token, cls_id), (sep_token, sep_id)])


def register_special_tokens(backend: tokenizers.Tokenizer) -> None:
    """Mark the project's special tokens as special (matched whole, skipped when decoding)."""
    present = [tok for tok in SPECIAL_TOKENS.values() if backend.token_to_id(tok) is not None]
    backend.add_special_tokens([AddedToken(tok, special=True, normalized=False) for tok in present])


def resolve_special_ids(backend: tokenizers.Tokenizer, names: dict[str, str | None], source: str) -> dict[str, int]:
    """Resolve role -> id; raise if a role the pipeline needs is absent from the vocabulary."""
    ids: dict[str, int] = {}
    for role in _REQUIRED_ROLES:
        token = names.get(role) or SPECIAL_TOKENS[role]
        token_id = backend.token_to_id(token)
        if token_id is None:
            raise ValueError(f"tokenizer {source} has no {role} token ({token!r}); CrossBERT data needs "
                             f"{', '.join(SPECIAL_TOKENS[r] for r in _REQUIRED_ROLES)} (or their equivalents)")
        ids[role] = token_id
    eod = [backend.token_to_id(t) for t in (names.get("eod"), *_EOD_FALLBACKS) if t]
    ids["eod"] = next((i for i in eod if i is not None), ids["sep"])
    return ids


def _names_from_config(directory: Path) -> dict[str, str | None]:
    """Special-token texts from tokenizer_config.json / special_tokens_map.json, when present."""
    names: dict[str, str | None] = {}
    for fname in NAME_FILES:
        path = directory / fname
        if not path.exists():
            continue
        raw = json.loads(path.read_text())
        for role in _REQUIRED_ROLES:
            value = raw.get(f"{role}_token")
            value = value.get("content") if isinstance(value, dict) else value
            if value and role not in names:
                names[role] = value
    return names


def _from_hf_directory(directory: Path) -> Tokenizer:
    """Any HF tokenizer directory without tokenizer.json (e.g. a BERT vocab.txt): convert via transformers."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(directory))
    backend = getattr(hf, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(f"{directory}: only fast (tokenizers-backed) Hugging Face tokenizers are supported")
    names = {role: getattr(hf, f"{role}_token", None) for role in _REQUIRED_ROLES}
    return Tokenizer(backend=backend, special_ids=resolve_special_ids(backend, names, str(directory)))


def tokenizer_from_spm(model_path: str | Path) -> Tokenizer:
    """Build the equivalent fast tokenizer from a sentencepiece ``.model`` (BPE or unigram)."""
    backend = spm_to_tokenizers(Path(model_path))
    register_special_tokens(backend)
    add_bert_post_processor(backend, SPECIAL_TOKENS["cls"], SPECIAL_TOKENS["sep"])
    return Tokenizer(backend=backend, special_ids=resolve_special_ids(backend, {}, str(model_path)),
                     spm_model=Path(model_path))


def _backend_from_file(path: Path) -> tokenizers.Tokenizer:
    """``tokenizers.Tokenizer.from_file`` with its bare ``Exception`` turned into a ValueError naming the file."""
    try:
        return tokenizers.Tokenizer.from_file(str(path))
    except Exception as err:  # the Rust binding raises plain Exception for any parse error
        raise ValueError(f"{path}: not a tokenizer.json file ({err})") from None


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load from a tokenizer directory, a ``tokenizer.json`` file, a sentencepiece ``.model`` file,
    or any Hugging Face fast-tokenizer directory. Raises ``FileNotFoundError``/``ValueError`` with
    the path when nothing usable is there."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"tokenizer not found: {path}")
    if path.is_file() and path.suffix == ".model":
        return tokenizer_from_spm(path)
    if path.is_file():
        backend = _backend_from_file(path)
        return Tokenizer(backend=backend, special_ids=resolve_special_ids(backend, _names_from_config(path.parent), str(path)))
    if (path / "tokenizer.json").exists():
        backend = _backend_from_file(path / "tokenizer.json")
        spm = path / SPM_MODEL_NAME
        return Tokenizer(backend=backend, special_ids=resolve_special_ids(backend, _names_from_config(path), str(path)),
                         spm_model=spm if spm.exists() else None)
    return _from_hf_directory(path)


def _load_inputs(path: Path) -> list[tuple[str, Path]]:
    """What :func:`load_tokenizer` reads for ``path``: every file of a directory, or the file and the
    special-token configs beside it (``_names_from_config``)."""
    if path.is_dir():
        return [(item.name, item) for item in sorted(path.iterdir()) if item.is_file()]
    return [(path.name, path), *((name, path.parent / name) for name in NAME_FILES)]


@functools.lru_cache(maxsize=4)
def _cached_load(path: str, identity: str) -> Tokenizer:
    return load_tokenizer(path)


def run_tokenizer(path: str | Path) -> Tokenizer:
    """:func:`load_tokenizer` for a run's ``data.tokenizer``, loaded once per process while the files it reads hold
    the same bytes (``content_identity``, as every other key of the project: a file rewritten in place is loaded
    again whatever its size and mtime; large files, e.g. weights beside an HF tokenizer, are sampled). Callers
    only read it: the fingerprint, special ids and size."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"tokenizer not found: {path}")
    return _cached_load(str(path.resolve()), files_identity(_load_inputs(path), sample_above=SAMPLE_ABOVE))
