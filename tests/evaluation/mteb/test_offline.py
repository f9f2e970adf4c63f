"""crossbert-mteb offline: task folders and their column layouts, the embedding recipe, mteb's registered
tasks fed with local rows, and the CLI end to end (benchmark directory, --local-task, --reference, the
feature cache) through the real mteb package with a tiny random HF BERT (no network)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from megatron_crossbert.evaluation.tasks.folders import discover_task_folders, read_columns, read_task
from megatron_crossbert.evaluation.mteb.tasks import LocalTaskSpec
from megatron_crossbert.evaluation.recipe import EmbeddingRecipe, read_sentence_transformers_recipe, resolve_recipe
from tests.support.synthetic_eval import write_glue_fixture, write_jsonl_task, write_mteb_lite_fixture, write_sts_jsonl


def _jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_local_spec_parsing(tmp_path):
    spec = LocalTaskSpec.parse(f"sts:my-sts:{tmp_path}/a:b.jsonl")
    assert spec.kind == "sts" and spec.name == "my-sts" and str(spec.path).endswith("a:b.jsonl")
    with pytest.raises(ValueError):
        LocalTaskSpec.parse("retrieval:x:/tmp")


def test_split_files_leave_with_mteb_columns(tmp_path):
    old = read_columns(write_sts_jsonl(tmp_path / "sts.jsonl", n=6), "sts")
    assert len(old["sentence1"]) == 6 and old["score"][0] == 5.0
    tsv = read_columns(write_glue_fixture(tmp_path / "glue", n=5) / "STS-B" / "dev.tsv", "sts")
    assert len(tsv["sentence2"]) == 5 and isinstance(tsv["score"][1], float)
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    (tmp_path / "hub" / "STSX" / "data").mkdir(parents=True)  # a hub snapshot's layout
    pq.write_table(pa.table({"sentence1": ["a", "c"], "sentence2": ["b", "d"], "score": [2.5, 4.0]}),
                   tmp_path / "hub" / "STSX" / "data" / "test-00000-of-00001.parquet")
    (task,) = discover_task_folders(tmp_path / "hub")
    assert task.kind == "sts" and read_task(task) == {"test": {"sentence1": ["a", "c"], "sentence2": ["b", "d"],
                                                               "score": [2.5, 4.0]}}
    bad = tmp_path / "bad.tsv"
    bad.write_text("sentence1\tsentence2\tscore\na\tb\t1\nshort row\n")
    with pytest.raises(ValueError, match="bad.tsv: lines \\[3\\]"):
        read_columns(bad, "sts")


def test_discovery_decides_the_kind_from_the_columns(tmp_path):
    tasks = {t.name: t for t in discover_task_folders(write_mteb_lite_fixture(tmp_path / "bench"))}
    assert {n: t.kind for n, t in tasks.items()} == {"ToyIntents": "classification", "ToySTSA": "sts",
                                                     "ToySTSB": "sts"}
    assert set(read_task(tasks["ToySTSB"])["test"]) == {"sentence1", "sentence2", "score"}
    assert set(read_task(tasks["ToyIntents"])) == {"train", "test"}
    (tmp_path / "bench" / "notes").mkdir()  # not a task folder: ignored
    assert len(discover_task_folders(tmp_path / "bench")) == 3
    assert [t.name for t in discover_task_folders(tmp_path / "bench" / "ToySTSA")] == ["ToySTSA"]
    with pytest.raises(FileNotFoundError, match="holds no task folder"):
        discover_task_folders(tmp_path / "bench" / "notes")


@pytest.mark.parametrize("rows, message", [
    ([{"sentence1": "a", "other": 1}], "neither STS"),
    ([{"text": "a", "label": 1}], "neither STS"),  # classification without a train split
    ([{"text": "a", "text_pair": "b", "label": 1}], "pair classification"),
])
def test_a_bad_folder_is_an_error_naming_it(tmp_path, rows, message):
    _jsonl(tmp_path / "broken" / "test.jsonl", rows)
    with pytest.raises(ValueError, match=f"broken.*{message}"):
        discover_task_folders(tmp_path)


def test_recipe_comes_from_the_sentence_transformers_config(tmp_path, minilm_dir):
    recipe = read_sentence_transformers_recipe(minilm_dir)
    assert (recipe.pooling, recipe.normalize, recipe.max_len) == ("mean", True, 256)
    assert resolve_recipe(minilm_dir, normalize=False).normalize is False
    assert resolve_recipe(tmp_path / "missing") == EmbeddingRecipe(max_len=256) and EmbeddingRecipe().tokens == 256
    dense = {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}
    norm = {"path": "3_Normalize", "type": "sentence_transformers.models.Normalize"}
    (tmp_path / "modules.json").write_text(json.dumps([dense, norm]))
    assert read_sentence_transformers_recipe(tmp_path).dense == (str(tmp_path / "2_Dense"),)
    (tmp_path / "modules.json").write_text(json.dumps([norm, dense]))  # a Dense after the norm is not ours to redo
    with pytest.raises(ValueError, match="modules.json.*Dense"):
        read_sentence_transformers_recipe(tmp_path)
    (tmp_path / "modules.json").write_text(json.dumps([{"path": "2_LSTM", "type": "sentence_transformers.models.LSTM"}]))
    with pytest.raises(ValueError, match="modules.json.*LSTM"):
        read_sentence_transformers_recipe(tmp_path)
    with pytest.raises(ValueError, match="pooling"):
        EmbeddingRecipe(pooling="max")


def test_each_distinct_text_is_encoded_once():
    from megatron_crossbert.evaluation.embedder import embed_unique

    seen = []

    def embed(texts):
        seen.extend(texts)
        return np.array([[len(t), ord(t[0])] for t in texts], np.float32)

    out = embed_unique(embed, ["bb", "a", "bb", "a", "c"])
    assert sorted(seen) == ["a", "bb", "c"] and out[:, 0].tolist() == [2, 1, 2, 1, 1]


def test_registered_task_or_local(mteb_lite_dir, tmp_path):
    """The shared folders become mteb's own task objects where the data is MTEB's (STS12 with all five parts,
    STS13, Banking77), and a local task where it is not (STS12 without its MSRvid part); a subsample is
    always local."""
    from megatron_crossbert.evaluation.mteb.tasks import build_task

    folders = {t.name: t for t in discover_task_folders(mteb_lite_dir)}
    sts13, b77, sts12 = (build_task(folders[n]) for n in ("STS13", "Banking77", "STS12"))
    assert sts13.mteb_name == "STS13" and type(sts13.task).__module__.startswith("mteb.tasks")
    assert sts12.mteb_name == "STS12" and len(sts12.task.dataset["test"]) == 3108
    assert b77.mteb_name == "Banking77Classification" and (b77.task.samples_per_label, b77.task.n_experiments) == (8, 10)
    assert "superseded" in b77.note
    rows = (mteb_lite_dir / "STS12" / "test.jsonl").read_text(encoding="utf-8").splitlines()
    partial = tmp_path / "STS12"
    partial.mkdir()
    (partial / "test.jsonl").write_text(
        "\n".join(r for r in rows if json.loads(r)["subset"] != "MSRvid") + "\n", encoding="utf-8")
    local = build_task(next(f for f in discover_task_folders(tmp_path) if f.name == "STS12"))
    assert local.mteb_name is None and local.name == "STS12-local" and "3108" in local.note
    subset = build_task(folders["STS13"], max_test=50)
    assert subset.mteb_name is None and subset.name == "STS13-subset" and len(subset.task.dataset["test"]) == 50


def test_english_subset_of_a_multilingual_task_runs_with_its_settings(mteb_lite_dir, tmp_path):
    """AmazonCounterfactual's folder is the `en` subset of mteb's multilingual task: it runs as that task
    (32 train rows per label, 10 experiments), that subset alone, on the test split only; a copy with
    other label counts stays a local task with the reason."""
    from megatron_crossbert.evaluation.mteb.tasks import build_task

    folder = next(f for f in discover_task_folders(mteb_lite_dir) if f.name == "AmazonCounterfactual")
    built = build_task(folder)
    assert (built.mteb_name, built.subset, built.name) == ("AmazonCounterfactualClassification", "en",
                                                           "AmazonCounterfactualClassification")
    assert (built.task.samples_per_label, built.task.n_experiments) == (32, 10)
    assert built.task.hf_subsets == ["en"] and list(built.task.eval_splits) == ["test"]
    assert len(built.task.dataset["en"]["train"]) == 4018 and len(built.task.dataset["en"]["test"]) == 670
    copy = tmp_path / "AmazonCounterfactual"
    copy.mkdir()
    (copy / "train.jsonl").write_text((folder.splits["train"]).read_text(encoding="utf-8"), encoding="utf-8")
    (copy / "test.jsonl").write_text("".join(folder.splits["test"].read_text(encoding="utf-8").splitlines(True)[:-1]),
                                     encoding="utf-8")
    local = build_task(next(iter(discover_task_folders(tmp_path))))
    assert local.mteb_name is None and local.name == "AmazonCounterfactual-local" and "669 rows" in local.note


def _with_normalize(src, dst):
    """A copy of the tiny encoder with the sentence-transformers modules of a normalised model."""
    shutil.copytree(src, dst)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (dst / "modules.json").write_text(json.dumps(modules))
    (dst / "1_Pooling").mkdir()
    (dst / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    (dst / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 24}))
    return dst


@pytest.mark.slow
def test_crossbert_mteb_benchmark_dir(tmp_path, tiny_hf_encoder, capsys):
    from megatron_crossbert.cli.mteb import main

    bench = write_mteb_lite_fixture(tmp_path / "bench")
    reference = tmp_path / "ref.json"
    reference.write_text(json.dumps({"label": "published", "scores": {"ToySTSA": 50.0}}))
    out, cache = tmp_path / "out", tmp_path / "cache"
    argv = ["--model", str(tiny_hf_encoder), "--benchmark-dir", str(bench), "--reference", str(reference),
            "--cache-dir", str(cache), "--out", str(out)]
    assert main(argv) == 0
    summary = json.loads((out / "mteb_summary.json").read_text())
    rows = {row["task"]: row for row in summary["tasks"]}
    assert set(rows) == {"ToySTSA", "ToySTSB", "ToyIntents"} and not summary["errors"]
    assert rows["ToyIntents"]["type"] == "Classification" and rows["ToyIntents"]["rows"] == {"train": 36, "test": 18}
    assert rows["ToySTSA"]["delta"] == pytest.approx(rows["ToySTSA"]["main_score"] - 50.0)
    assert summary["average"] == pytest.approx(np.mean([r["main_score"] for r in rows.values()]))
    assert summary["model"]["recipe"]["source"] == "default" and summary["timing"]["texts_encoded"] > 0
    record = json.loads((out / "embedder.json").read_text())  # what was resolved, beside the results
    assert (record["given"], record["model"]["form"], record["pooling"]["source"]) == (
        str(tiny_hf_encoder), "hf-dir", "default")
    assert record["feature_cache"] == str(cache / "features") and record["identity"].startswith("hf-dir:")
    result = json.loads((out / "ToySTSA.json").read_text())  # mteb's result format
    assert result["task_name"] == "ToySTSA" and "cosine_spearman" in result["scores"]["test"][0]
    table = capsys.readouterr().out
    assert "| ToySTSA | (local) | cosine_spearman |" in table and "| published | Δ |" in table and "average" in table
    assert main(argv) == 2 and "exists: pass --overwrite" in capsys.readouterr().err  # kept results stay
    assert main(argv + ["--overwrite", "--tasks", "ToySTSA"]) == 0
    again = json.loads((out / "mteb_summary.json").read_text())
    assert again["timing"]["texts_encoded"] == 0  # every feature came from the cache
    assert again["tasks"][0]["main_score"] == pytest.approx(rows["ToySTSA"]["main_score"], abs=1e-9)
    normalised = _with_normalize(tiny_hf_encoder, tmp_path / "st_model")
    assert main(["--model", str(normalised), "--benchmark-dir", str(bench), "--tasks", "ToyIntents",
                 "--cache-dir", "none", "--out", str(tmp_path / "out_st")]) == 0
    recipe = json.loads((tmp_path / "out_st" / "mteb_summary.json").read_text())["model"]["recipe"]
    assert (recipe["pooling"], recipe["normalize"], recipe["max_len"]) == ("cls", True, 24)
    record = json.loads((tmp_path / "out_st" / "embedder.json").read_text())
    assert (record["model"]["form"], record["pooling"]["source"]) == ("sentence-transformers",
                                                                      str(normalised / "modules.json"))
    assert main(["--model", str(tiny_hf_encoder), "--benchmark-dir", str(bench), "--tasks", "STS99"]) == 2
    assert "no task folder ['STS99']" in capsys.readouterr().err


def test_crossbert_mteb_offline_local_tasks(tmp_path, tiny_hf_encoder):
    from megatron_crossbert.cli.mteb import main

    write_jsonl_task(tmp_path / "cls", n_train=40, n_test=30)
    sts = write_sts_jsonl(tmp_path / "sts.jsonl", n=30)
    mteb_columns = write_mteb_lite_fixture(tmp_path / "bench") / "ToySTSA" / "test.jsonl"
    out = tmp_path / "out"
    rc = main(["--model", str(tiny_hf_encoder), "--local-task", f"classification:toycls:{tmp_path / 'cls'}",
               "--local-task", f"sts:toysts:{sts}", "--local-task", f"sts:mtebcols:{mteb_columns}",
               "--n-experiments", "2", "--max-len", "16", "--raise-error", "--cache-dir", "none", "--out", str(out)])
    assert rc == 0
    summary = json.loads((out / "mteb_summary.json").read_text())
    scores = {row["task"]: row for row in summary["tasks"]}
    assert set(scores) == {"toycls", "toysts", "mtebcols"} and not summary["errors"]
    assert scores["toycls"]["type"] == "Classification" and scores["toycls"]["main_score"] > 60.0
    assert scores["toysts"]["type"] == "STS" and -100.0 <= scores["toysts"]["main_score"] <= 100.0
    per_task = json.loads((out / "toycls.json").read_text())
    assert len(per_task["scores"]["test"][0]["scores_per_experiment"]) == 2
    assert "| toycls |" in (out / "mteb_summary.md").read_text()


def test_help_says_what_every_flag_does(capsys):
    from megatron_crossbert.cli.mteb import build_parser, main

    parser = build_parser()
    undocumented = [a.option_strings for a in parser._actions if a.option_strings and not a.help]
    assert not undocumented
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    text = capsys.readouterr().out
    assert exit_info.value.code == 0 and "--benchmark-dir" in text and "--reference" in text and "--no-normalize" in text
