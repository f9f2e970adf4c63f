"""``limit_threads``: an explicit count reaches torch and every BLAS/OpenMP pool, loaded before or after it."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, os, numpy, torch
from megatron_crossbert.platform.threads import limit_threads
limit_threads({threads})
import scipy.linalg, sklearn.linear_model  # their pools load after the call: the environment reaches them
from threadpoolctl import threadpool_info
print(json.dumps({{"torch": torch.get_num_threads(), "pools": [p["num_threads"] for p in threadpool_info()],
                  "env": os.environ.get("OPENBLAS_NUM_THREADS")}}))
"""


def _run(threads) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE.format(threads=threads)], capture_output=True, text=True,
                          timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_explicit_count_limits_torch_and_every_pool():
    one = _run(1)
    assert one["torch"] == 1 and one["env"] == "1" and len(one["pools"]) >= 2 and set(one["pools"]) == {1}


def test_no_count_sets_torch_only():
    default = _run(None)
    assert default["torch"] >= 1 and default["env"] is None
