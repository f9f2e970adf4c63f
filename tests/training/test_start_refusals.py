"""A run that cannot work is refused before its first step, in one line naming the key, and leaves no
trace in a save directory it created.

Unguarded, ``data.split='1,1000,0'`` was refused after start-up and left ``run.lock`` in the save dir the run
had just made; a missing probe task failed after step 1; TP=2 in one process, ``--exit-at-iteration -1``
(trained a step and exited 0) and ``--save FILE`` (``[Errno 17] File exists``) were found late or never;
switching ``parallel.use_distributed_optimizer`` between save and resume ended in a serialized megatron
traceback. One ``cli_cases`` subprocess runs every case (one import, one fork per case).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.checkpoints import tree_digest
from tests.support.cli_cases import error_lines, run_cases
from tests.support.training import tiny_overrides

pytestmark = pytest.mark.e2e
PRETRAIN = "megatron_crossbert.cli.pretrain"


def _pretrain(corpus: str, save: Path | None, *extra: str, **overrides) -> dict:
    over = tiny_overrides("crossbert", corpus, save, **{"training__train_iters": 4, **overrides})
    return {"module": PRETRAIN, "argv": [a for o in over for a in ("--set", o)] + list(extra)}


def _cases(tmp: Path, corpus: str, ckpt: Path) -> dict[str, tuple[dict, str]]:
    """name -> (case, the fragment its one error line holds); cases run in this order."""
    afile = tmp / "afile"
    afile.write_text("not a directory\n")
    resumed = tmp / "resumed"
    shutil.copytree(ckpt, resumed)
    dist = tmp / "dist_on"
    return {
        "dist-opt on: save 2 steps": (_pretrain(corpus, dist, "--exit-at-iteration", "2",
                                                parallel__use_distributed_optimizer=True), ""),
        "split rounds to 0 train documents": (_pretrain(corpus, tmp / "fresh_split", data__split="1,1000,0"),
                                              "the train split (1,1000,0) has 0 of 120 documents"),
        "probe task missing": (_pretrain(corpus, tmp / "fresh_probe", training__probe_interval=1,
                                         training__probe_tasks=[str(tmp / "nonexistent")]),
                               f"training.probe_tasks: {tmp / 'nonexistent'}: no such directory"),
        "TP=2 in one process": (_pretrain(corpus, tmp / "fresh_tp", parallel__tensor_model_parallel_size=2),
                                "parallel.tensor_model_parallel_size * pipeline_model_parallel_size = 2 does not "
                                "divide the 1 process(es)"),
        "--exit-at-iteration -1": (_pretrain(corpus, tmp / "fresh_exit", "--exit-at-iteration", "-1"),
                                   "--exit-at-iteration must be >= 1"),
        "--exit-at-iteration at the resumed step": (_pretrain(corpus, resumed, "--exit-at-iteration", "2",
                                                              training__train_iters=2),
                                                    "--exit-at-iteration 2 is not after the resumed step 2"),
        "save_interval without --save": (_pretrain(corpus, None, checkpoint__save_interval=1),
                                         "checkpoint.save_interval=1 needs checkpoint.save_dir (--save)"),
        "no data": (_pretrain(corpus, tmp / "fresh_nodata", data__data_path=[]), "data.data_path=[] is empty"),
        "--save FILE": (_pretrain(corpus, afile), f"--save (checkpoint.save_dir) {afile}: is a file, not a directory"),
        "--save FILE/sub": (_pretrain(corpus, afile / "sub"), f"{afile}/sub: {afile} is a file, so no directory"),
        "tensorboard_dir FILE": (_pretrain(corpus, tmp / "fresh_tb", training__tensorboard_dir=str(afile)),
                                 f"training.tensorboard_dir {afile}: is a file"),
        "dist-opt switched on": (_pretrain(corpus, tmp / "on", "--resume-from", str(ckpt / "iter_0000002"),
                                           parallel__use_distributed_optimizer=True),
                                 "parallel.use_distributed_optimizer: "),
        "dist-opt switched off": (_pretrain(corpus, dist), "parallel.use_distributed_optimizer: "),
    }


@pytest.mark.slow
def test_refusals_come_before_the_first_step_and_leave_no_trace(tiny_checkpoint, indexed_corpus, tmp_path):
    cases = _cases(tmp_path, indexed_corpus, tiny_checkpoint)
    before = {"resumed": tree_digest(tmp_path / "resumed")}
    results = dict(zip(cases, run_cases([case for case, _ in cases.values()], tmp_path)))
    saved = results.pop("dist-opt on: save 2 steps")
    assert saved["rc"] == 0 and (tmp_path / "dist_on" / "iter_0000002").is_dir(), saved["stderr"][-2000:]
    for name, result in results.items():
        errors = error_lines(result)
        assert result["rc"] == 2 and "Traceback" not in result["stderr"], (name, result["stderr"][-3000:])
        assert len(errors) == 1 and cases[name][1] in errors[0], (name, errors, cases[name][1])
        assert not any(line.startswith("step ") for line in result["stdout"].splitlines()), (name, "trained")
    for fresh in ("fresh_split", "fresh_probe", "fresh_tp", "fresh_exit", "fresh_nodata", "fresh_tb", "on"):
        assert not (tmp_path / fresh).exists(), f"{fresh}: a refused run left {sorted((tmp_path / fresh).iterdir())}"
    assert tree_digest(tmp_path / "resumed") == before["resumed"]  # a directory it did not create: untouched
    switched = error_lines(results["dist-opt switched on"])[0]
    assert "was saved with false, this run sets true" in switched and "--init-from" in switched
    assert "was saved with true, this run sets false" in error_lines(results["dist-opt switched off"])[0]
    assert (tmp_path / "afile").read_text() == "not a directory\n"
