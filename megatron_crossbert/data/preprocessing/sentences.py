"""Offline sentence splitting with nltk Punkt (for ``crossbert-preprocess --split-sentences``).

Never downloads: machines running preprocessing often have no network, and a silent download would
make output depend on what happened to be fetched. If nltk's pretrained ``punkt_tab`` model for the
language is installed it is used; otherwise an unsupervised ``PunktTrainer`` is trained on a prefix
of the input itself (deterministic for the same input, so every worker count gives the same
splits). ``describe()`` says which one was used; the preprocess report records it.
"""

from __future__ import annotations

from collections.abc import Iterable

from nltk.tokenize.punkt import PunktSentenceTokenizer, PunktTrainer

DEFAULT_TRAIN_CHARS = 2_000_000


class SentenceSplitter:
    """Picklable wrapper around a Punkt tokenizer; ``split(text)`` returns non-empty sentences."""

    def __init__(self, punkt: PunktSentenceTokenizer, source: str) -> None:
        self.punkt = punkt
        self.source = source

    def split(self, text: str) -> list[str]:
        return [s for s in self.punkt.tokenize(text) if s.strip()]

    def describe(self) -> str:
        return self.source


def pretrained_punkt(language: str = "english") -> PunktSentenceTokenizer | None:
    """nltk's installed ``punkt_tab`` model, or None when it is not installed (no download)."""
    try:
        from nltk.tokenize.punkt import PunktTokenizer

        return PunktTokenizer(language)
    except (LookupError, OSError, ImportError):
        return None


def train_punkt(texts: Iterable[str], max_chars: int = DEFAULT_TRAIN_CHARS) -> PunktSentenceTokenizer:
    """Unsupervised Punkt parameters learned from (a prefix of) ``texts``."""
    trainer = PunktTrainer()
    trainer.INCLUDE_ALL_COLLOCS = True
    seen = 0
    for text in texts:
        trainer.train(text, finalize=False)
        seen += len(text)
        if seen >= max_chars:
            break
    trainer.finalize_training()
    return PunktSentenceTokenizer(trainer.get_params())


def make_splitter(sample_texts: Iterable[str], language: str = "english",
                  max_chars: int = DEFAULT_TRAIN_CHARS) -> SentenceSplitter:
    """Pretrained punkt_tab if installed, else Punkt trained on ``sample_texts``."""
    punkt = pretrained_punkt(language)
    if punkt is not None:
        return SentenceSplitter(punkt, f"nltk punkt_tab ({language})")
    return SentenceSplitter(train_punkt(sample_texts, max_chars),
                            f"Punkt trained on the first {max_chars} characters of the input (punkt_tab not installed)")
