"""The pieces the study's commands share (``experiments/claims/cli.py``): a work dir whose indexed dataset is
missing either file has no dataset, for the side commands and for the study's page alike; a stop signal ends a
side command with 128 + its number."""

from __future__ import annotations

import signal

import pytest

from experiments.claims import cli
from experiments.claims.ablations.run import main as ablations_main
from experiments.claims.study.data_stage import data_prefix
from experiments.claims.study.stopping import StudyStopped
from experiments.claims.sweep.run import main as sweep_main
from megatron_crossbert.results_page import render_blocks


def _half_dataset(work):
    """A work dir whose data stage left the .bin but not the .idx (a preprocess killed between the two)."""
    bin_path = data_prefix(work) + ".bin"
    (work / "data").mkdir(parents=True)
    open(bin_path, "wb").close()
    return work


@pytest.mark.parametrize("main, extra", [(sweep_main, []),
                                         (ablations_main, ["--glue-dir", "glue", "--mteb-lite-dir", "none"])])
def test_a_side_command_refuses_a_work_dir_without_both_dataset_files(tmp_path, capsys, main, extra):
    work = _half_dataset(tmp_path / "work")
    assert main(["--work-dir", str(work), "--results-md", "none", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--work-dir {work}: no indexed dataset" in err and "\n" not in err


def test_the_study_page_reads_half_a_dataset_as_none(tmp_path):
    from experiments.claims.claims_section import _loss_blocks
    from experiments.claims.plan import all_runs
    from experiments.claims.study.plan import resolve_plan

    plan = resolve_plan("smoke")
    work = _half_dataset(tmp_path / "work")
    assert render_blocks(_loss_blocks(plan, all_runs(plan), work)).startswith("Not measured yet")


def test_a_stopped_side_command_exits_with_128_plus_the_signal_and_says_how_to_resume(capsys):
    def stopped():
        raise StudyStopped(signal.SIGTERM)

    assert cli.exit_status("sweep", stopped) == 128 + signal.SIGTERM
    assert "rerun the same command to resume" in capsys.readouterr().err
    assert cli.exit_status("sweep", lambda: None) == 0
