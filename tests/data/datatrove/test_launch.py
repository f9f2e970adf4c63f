"""The launchers: the SLURM array script datatrove generates for our pipeline (SLURM is not installed here:
sbatch is replaced, and one array task is then run as the script would run it), and the CLI's refusals."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from megatron_crossbert.cli.preprocess_datatrove import main as datatrove_main
from megatron_crossbert.data.datatrove.launch import LaunchConfig, build_pipeline, make_executor
from megatron_crossbert.data.datatrove.shards import task_files
from megatron_crossbert.data.preprocessing.preprocess import PreprocessOptions
from tests.support import REPO_ROOT
from tests.support.synthetic_text import synthetic_documents, write_jsonl


@pytest.fixture
def inputs(tmp_path) -> list[str]:
    return [str(write_jsonl(tmp_path / f"in{i}.jsonl", synthetic_documents(30, seed=i))) for i in range(4)]


def test_slurm_array_script_runs_our_pipeline(inputs, tmp_path, bpe_tokenizer, monkeypatch):
    import datatrove.executor.slurm as slurm

    submitted: list[tuple[str, tuple]] = []
    monkeypatch.setattr(slurm, "launch_slurm_job", lambda script, _retriever, *args: submitted.append((script, args))
                        or str(4000 + len(submitted)))
    cfg = LaunchConfig(output_dir=str(tmp_path / "out"), logging_dir=str(tmp_path / "logs"), executor="slurm",
                       tasks=4, partition="cpu", time="2:00:00", cpus_per_task=2, env_command="source venv/bin/activate",
                       sbatch_args={"account": "proj"})
    opts = PreprocessOptions(inputs=inputs, output_prefix="unused", tokenizer=str(bpe_tokenizer), workers=2,
                             progress=False)
    make_executor(cfg, build_pipeline(cfg, opts)).run()
    script = (tmp_path / "logs" / "launch_script.slurm").read_text()
    assert submitted[0][0] == script and "--export=ALL,RUN_OFFSET=0" in submitted[0][1]
    for directive in ("--array=0-3", "--cpus-per-task=2", "--partition=cpu", "--time=2:00:00", "--account=proj",
                      "--job-name=crossbert_preprocess", "--requeue"):
        assert f"#SBATCH {directive}\n" in script
    assert "source venv/bin/activate\n" in script
    command = re.search(r"srun .*-n 1 (launch_pickled_pipeline \S+executor\.pik)", script)
    assert command and command.group(1).endswith(str(tmp_path / "logs" / "executor.pik"))
    # array task 1, as the script runs it (without srun, and with a stand-in for the `scontrol show hostnames`
    # that datatrove asks for the node list): it writes shard 00001 from its own files only
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "scontrol").write_text("#!/bin/sh\necho localhost\n")
    (fake_bin / "scontrol").chmod(0o755)
    env = dict(os.environ, SLURM_ARRAY_TASK_ID="1", SLURM_NODELIST="localhost", PYTHONPATH=str(REPO_ROOT),
               TOKENIZERS_PARALLELISM="false", PATH=f"{fake_bin}{os.pathsep}{os.environ.get('PATH', '')}")
    launcher = Path(sys.executable).parent / "launch_pickled_pipeline"
    subprocess.run([str(launcher), str(tmp_path / "logs" / "executor.pik")], env=env, check=True,
                   capture_output=True, timeout=300)
    report = (tmp_path / "out" / "00001_preprocess_report.json").read_text()
    assert all((f in report) == (f in task_files(inputs, 1, 4)) for f in inputs)
    assert sorted(p.name for p in (tmp_path / "out").iterdir())[0].startswith("00001_")


def test_cli_refusals_are_one_line(inputs, tmp_path, bpe_tokenizer, capsys):
    common = ["--input", *inputs, "--output-dir", str(tmp_path / "out"), "--tokenizer", str(bpe_tokenizer)]
    assert datatrove_main(common + ["--executor", "slurm"]) == 2
    assert datatrove_main(common + ["--tasks", "0"]) == 2
    assert datatrove_main(common + ["--reader", "jsonl"]) == 2  # datatrove's readers take one folder
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert any("--partition" in line for line in err) and any("--tasks must be >= 1" in line for line in err)
    assert any("reads one folder or fsspec URL" in line for line in err)
