"""The Ray executor runs two tasks on a local Ray cluster, and their merge is one crossbert-preprocess run's bytes.

A local cluster on 2 cores costs about 4 s wall and 2.5 CPU-s to start and stop (ray.init + shutdown, measured
at load 2); the whole test about 10 s at load 2, 50 s at load 7. The cluster is kept small (2 CPUs, a 80 MB
object store, no dashboard). Skipped where ray is not installed (the ``ray`` extra).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from megatron_crossbert.data.datatrove.shards import sealed_prefixes
from megatron_crossbert.data.indexed.merge import merge_shards, read_shards
from megatron_crossbert.data.preprocessing.preprocess import PreprocessOptions, preprocess
from tests.support import REPO_ROOT
from tests.support.synthetic_text import synthetic_documents, write_jsonl

pytest.importorskip("ray")

_DRIVER = """
import sys, ray
from megatron_crossbert.data.datatrove.launch import LaunchConfig, launch
from megatron_crossbert.data.preprocessing.preprocess import PreprocessOptions
out, tokenizer, files = sys.argv[1], sys.argv[2], sys.argv[3:]
ray.init(num_cpus=2, object_store_memory=80 << 20, include_dashboard=False, log_to_driver=False)
opts = PreprocessOptions(inputs=files, output_prefix="unused", tokenizer=tokenizer, append_eod=True, progress=False)
launch(LaunchConfig(output_dir=out + "/shards", logging_dir=out + "/logs", executor="ray", tasks=2), opts)
ray.shutdown()
"""


@pytest.mark.slow
def test_two_ray_tasks_merged_are_one_runs_bytes(tmp_path, bpe_tokenizer):
    files = [str(write_jsonl(tmp_path / f"in{i}.jsonl", synthetic_documents(40, seed=20 + i))) for i in range(3)]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TOKENIZERS_PARALLELISM="false", RAY_USAGE_STATS_ENABLED="0")
    done = subprocess.run([sys.executable, "-c", _DRIVER, str(tmp_path), str(bpe_tokenizer), *files], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(sealed_prefixes(tmp_path / "shards")) == 2
    merge_shards(read_shards(sealed_prefixes(tmp_path / "shards")), str(tmp_path / "merged"))
    single = preprocess(PreprocessOptions(inputs=files, output_prefix=str(tmp_path / "one"),
                                          tokenizer=str(bpe_tokenizer), append_eod=True, progress=False))
    for ext in (".bin", ".idx"):
        assert (tmp_path / f"merged{ext}").read_bytes() == Path(single["outputs"]["text"] + ext).read_bytes()
