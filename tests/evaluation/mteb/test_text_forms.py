"""MTEB's text form of STS12-16: the original SemEval text becomes SentEval's Moses-tokenised, lowercased text
where a folder becomes mteb's registered task, and nowhere else."""

from __future__ import annotations

import pytest

from megatron_crossbert.evaluation.mteb.text_forms import MTEB_TEXT_FORMS, mteb_text, senteval_form

pytest.importorskip("sacremoses", reason="MTEB's text form of STS12-16 needs sacremoses (the eval extra)")


def test_senteval_form_is_moses_tokens_lowercased_without_escaping():
    """``tokenizer.perl -l en -no-escape | lowercase.perl``: punctuation split off, clitics split, ``&`` and
    quotes kept as they are, numbers and abbreviations whole."""
    assert senteval_form('A man can\'t play the "Guitar" & sings.') == 'a man can \'t play the " guitar " & sings .'
    assert senteval_form("U.S. troops, 3.5% in Iraq") == "u.s. troops , 3.5 % in iraq"


def test_only_the_text_columns_of_listed_tasks_change():
    data = {"test": {"sentence1": ["A dog runs."], "sentence2": ["Dogs don't fly."], "score": [2.5]}}
    converted, note = mteb_text("STS14", data)
    assert converted == {"test": {"sentence1": ["a dog runs ."], "sentence2": ["dogs don 't fly ."], "score": [2.5]}}
    assert "Moses" in note and data["test"]["sentence1"] == ["A dog runs."]
    assert mteb_text("STSBenchmark", data) == (data, "")
    lowercase = {"test": {"sentence1": ["a dog 's bone ."], "sentence2": ["b"], "score": [1.0]}}
    assert mteb_text("STS14", lowercase) == (lowercase, ""), "text already in the form is not tokenised twice"
    assert set(MTEB_TEXT_FORMS) == {"STS12", "STS13", "STS14", "STS15", "STS16"}


@pytest.mark.parametrize("name", ["STS13", "STS16"])
def test_the_shared_folders_become_mtebs_text(mteb_lite_dir, name):
    """The registered task is fed SentEval's form of the folder's text, and that form's unique texts per side are
    exactly what mteb ships for the hub copy (the original text has more: case and spacing variants)."""
    from megatron_crossbert.evaluation.tasks.folders import discover_task_folders, read_task
    from megatron_crossbert.evaluation.mteb.tasks import build_task

    folder = next(f for f in discover_task_folders(mteb_lite_dir) if f.name == name)
    built = build_task(folder)
    original = read_task(folder)["test"]
    test = built.task.dataset["test"]
    assert built.mteb_name == name and "SentEval's form" in built.note
    assert list(test["sentence1"]) == [senteval_form(t) for t in original["sentence1"]]
    assert list(test["score"]) == pytest.approx(original["score"])
    stats = built.task.metadata.descriptive_stats["test"]
    for side, column in ((1, "sentence1"), (2, "sentence2")):
        assert len(set(test[column])) == stats[f"text{side}_statistics"]["unique_texts"]
    sub = build_task(folder, max_test=20)
    assert "SentEval" not in sub.note and list(sub.task.dataset["test"]["sentence1"])[0] in original["sentence1"]
