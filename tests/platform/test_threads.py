"""``limit_threads``: an explicit count reaches torch and every BLAS/OpenMP pool, loaded before or after it; a
count below 1 (or no count at all) is refused by the one check every ``--threads`` flag parses with."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from megatron_crossbert.platform.threads import ThreadCountError, limit_threads, thread_count

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


@pytest.mark.parametrize("text", ["0", "-1", "-8", "+0", "two", "1.5", "", " "])
def test_a_count_below_one_or_not_a_count_is_refused_naming_the_flag(text):
    with pytest.raises(ThreadCountError, match=r"^--threads: expected a count of CPU threads, at least 1") as refused:
        thread_count(text)
    named = str(int(text)) if _is_int(text) else repr(text)
    assert "\n" not in str(refused.value) and str(refused.value).endswith(f"got {named}")


@pytest.mark.parametrize("text,count", [("1", 1), ("3", 3), ("+2", 2), (" 4 ", 4)])
def test_a_count_parses(text, count):
    assert thread_count(text) == count == thread_count(count)


@pytest.mark.parametrize("threads", [0, -1, -4, True, 2.0, "0"])
def test_limit_threads_refuses_what_the_flag_refuses_and_changes_nothing(threads):
    """0 is never read as "one per core" (that is None), and a negative count never reaches torch."""
    import torch

    before = torch.get_num_threads()
    with pytest.raises(ThreadCountError):
        limit_threads(threads)
    assert torch.get_num_threads() == before


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True
