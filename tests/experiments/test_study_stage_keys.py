"""A study's work dir records what each stage's outputs were made with (``study.stage_keys``): a rerun with a
changed plan or changed data is refused before any stage runs, naming the file and the fields, and nothing there
is rewritten; knobs no output depends on, and a plan that adds runs, are not refused."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from experiments.claims.pipeline import ExperimentPaths, run_experiment
from experiments.claims.study.plan import resolve_plan
from tests.support import REPO_ROOT
from tests.support.synthetic_eval import write_glue_fixture

KEYS_FILE = "stage_keys.json"
PLANS = REPO_ROOT / "experiments" / "claims" / "plans"


@pytest.fixture
def inputs(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"document {i} of the corpus"}) + "\n" for i in range(20)))
    glue = write_glue_fixture(tmp_path / "glue", n=8)
    return ExperimentPaths(work_dir=str(tmp_path / "work"), corpus=str(corpus), glue_dir=str(glue),
                           probe_dir=str(tmp_path / "probe"), results_md=str(tmp_path / "results.md"),
                           figures_dir=str(tmp_path / "figures"), throughput_json=[])


def _plan_file(tmp_path, **changes) -> str:
    raw = yaml.safe_load((PLANS / "smoke.yaml").read_text())
    path = tmp_path / f"plan-{len(list(tmp_path.glob('plan-*')))}.yaml"
    path.write_text(yaml.safe_dump({**raw, **changes}))
    return str(path)


def test_a_changed_plan_into_a_used_work_dir_is_refused_before_any_stage(inputs, tmp_path):
    run_experiment(inputs, plan_name=_plan_file(tmp_path), stages=["probe"])  # nothing trained: nothing to probe
    keys = (tmp_path / "work" / KEYS_FILE).read_bytes()
    with pytest.raises(ValueError) as err:
        run_experiment(inputs, plan_name=_plan_file(tmp_path, probe_max_train=20), stages=["probe", "report"])
    message = str(err.value)
    assert KEYS_FILE in message and "probe_max_train 40 -> 20" in message and "\n" not in message
    assert (tmp_path / "work" / KEYS_FILE).read_bytes() == keys and not (tmp_path / "results.md").exists()


def test_which_changes_are_refused(inputs, tmp_path):
    from experiments.claims.study.stage_keys import claim_work_dir, plan_keys

    work, plan = tmp_path / "work", resolve_plan("smoke")
    work.mkdir()

    def claim(plan, stages, **paths):
        from experiments.claims.plan import all_runs

        where = dataclasses.replace(inputs, **paths)
        keys = plan_keys(plan, all_runs(plan), where.corpus, where.glue_dir, where.probe_dir, where.mteb_lite_dir)
        claim_work_dir(work, keys, stages)

    claim(plan, ["data", "train", "probe"])
    claim(dataclasses.replace(plan, probe_every=10, preprocess_workers=2), ["probe"])  # in no key
    claim(dataclasses.replace(plan, seeds=[1, 2, 3]), ["train"])  # more runs: their keys are added
    with pytest.raises(ValueError, match=r"data: vocab_size 512 -> 1024"):
        claim(dataclasses.replace(plan, vocab_size=1024), ["report"])
    with pytest.raises(ValueError, match=r"train:bert-s1: training.lr 0.001 -> 0.002"):
        claim(dataclasses.replace(plan, lr=0.002), ["probe"])
    copy = tmp_path / "glue_copy"
    copy.mkdir()
    (copy / "SST-2").mkdir()
    for name in ("train.tsv", "dev.tsv"):
        (copy / "SST-2" / name).write_bytes((tmp_path / "glue" / "SST-2" / name).read_bytes())
    claim(plan, ["probe"], glue_dir=str(copy))  # the same data elsewhere
    (copy / "SST-2" / "dev.tsv").write_text("sentence\tlabel\nanother row\t1\n")
    with pytest.raises(ValueError, match=r"probe: glue.SST-2 "):
        claim(plan, ["probe"], glue_dir=str(copy))


def test_a_config_field_added_after_a_run_was_recorded_is_no_change_at_its_default():
    """A work dir recorded before RunConfig gained a field resumes while the field holds its default."""
    from experiments.claims.plan import all_runs
    from experiments.claims.study.stage_keys import key_differences, train_key

    plan = resolve_plan("smoke")
    run = next(run for run in all_runs(plan) if run.arch == "crossbert")
    key = train_key(plan, run)
    older = json.loads(json.dumps(key))
    del older["model"]["decoder_cross_attention_only"]                   # recorded before the field existed
    assert key_differences(older, key, config=True) == []
    changed = train_key(plan, dataclasses.replace(run, decoder_cross_attention_only=True))
    assert key_differences(older, changed, config=True) == ["model.decoder_cross_attention_only False -> True"]
    assert key_differences({"a": 1}, {"a": 1, "b": 2}) == ["b '(absent)' -> 2"]   # other keys: any new field
