"""The text form of MTEB's hub copy of a task, given a folder that holds the task's original text.

MTEB's STS12-16 are not the SemEval text as released: they are SentEval's download of it
(``data/downstream/get_transfer_data.bash``), every sentence Moses-tokenised (``tokenizer.perl -l en
-no-escape``) and lowercased (``lowercase.perl``). The shared folders hold the original text, so a model is
scored on other strings than MTEB scored it on; for all-MiniLM-L6-v2 that moves STS14 by about 0.01. With
sacremoses (the Python port of the Moses tokenizer) the original text becomes MTEB's: its unique-text counts
equal mteb's shipped statistics on all five tasks, and its total length is within 0.01% of theirs.

The rule has one home, ``mteb_text``, called where a folder becomes mteb's registered task
(``tasks.registered_match``), and nowhere else: a local task, a subsampled one and the leak check keep the
folder's own text. Moses is not idempotent (``poor 's`` becomes ``poor ' s``), so a folder whose text is
lowercase throughout is taken to hold the hub copy already and is scored as it is (the original text has
capitals in almost every sentence).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

from megatron_crossbert.evaluation.tasks.folders import Data

SENTEVAL_FORM = "SentEval's form (Moses-tokenised, lowercased)"
"""How the report names the form."""
TEXT_COLUMNS = ("sentence1", "sentence2", "text")
"""The MTEB columns that hold text (``tasks/folders.py``' names)."""


@lru_cache(maxsize=1)
def _moses():
    try:
        from sacremoses import MosesTokenizer
    except ImportError as error:  # the eval extra carries it
        raise ImportError("sacremoses is needed to give STS12-16 MTEB's text form: pip install sacremoses "
                          "(part of megatron-crossbert[eval])") from error
    return MosesTokenizer(lang="en")


def senteval_form(text: str) -> str:
    """``text`` as SentEval wrote it: Moses tokens (no escaping of ``&``, quotes, brackets), lowercased."""
    return _moses().tokenize(text, escape=False, return_str=True).lower()


MTEB_TEXT_FORMS: dict[str, tuple[str, Callable[[str], str]]] = {
    name: (SENTEVAL_FORM, senteval_form) for name in ("STS12", "STS13", "STS14", "STS15", "STS16")}
"""Registered mteb task -> the form of its hub copy's text and the function that gives it; a task not listed
is scored on the folder's text as it is (STSBenchmark and AmazonCounterfactual hold MTEB's own text)."""


def mteb_text(task_name: str, data: Data) -> tuple[Data, str]:
    """``data`` in the text form of mteb's ``task_name``, and a note naming the form ("" when unchanged: a
    task whose hub copy is the original text, or text already lowercase throughout)."""
    if task_name not in MTEB_TEXT_FORMS:
        return data, ""
    texts = (v for columns in data.values() for column in TEXT_COLUMNS for v in columns.get(column, ()))
    if all(text == text.lower() for text in texts):
        return data, ""
    label, form = MTEB_TEXT_FORMS[task_name]
    converted = {split: {column: [form(v) for v in values] if column in TEXT_COLUMNS else values
                         for column, values in columns.items()} for split, columns in data.items()}
    return converted, f"text in {label}, as MTEB's hub copy"
