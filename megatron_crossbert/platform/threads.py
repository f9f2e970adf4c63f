"""How many CPU threads a process computes with: torch's intra-op pool, and the BLAS and OpenMP pools that
numpy, scipy and scikit-learn use (the probes' logistic regressions run there, not in torch).

``--threads 1`` on two processes beside each other must mean one core each. Setting torch's pool alone leaves
OpenBLAS and OpenMP at one thread per core, and where threads outnumber cores they spin-wait on each other. So
an explicit count also goes to the pools: to those already loaded through threadpoolctl (it comes with
scikit-learn, the ``eval`` extra), and to those loaded later, and to child processes, through the environment
variables the libraries read when they load.

Every ``--threads`` flag parses through :func:`thread_count`, and :func:`limit_threads` checks with it too: a
count is at least 1. "One thread per core" is said by leaving the flag out, never by 0 or a negative count (torch
raises on a negative one; 0 would silently read as the default).
"""

from __future__ import annotations

import importlib.util
import os

POOL_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
"""What OpenMP, OpenBLAS and MKL read for their thread count when they load."""


class ThreadCountError(Exception):
    """A ``--threads`` value that is not a count of at least 1. Not a ValueError on purpose: argparse would turn
    that into its usage block; this one reaches ``cli.errors.cli_main`` and is refused in one line."""


def thread_count(value: str | int) -> int:
    """The argparse ``type`` of every ``--threads`` flag, and :func:`limit_threads`' check: ``value`` as a count
    of CPU threads, at least 1; ThreadCountError naming ``--threads`` otherwise."""
    count = value
    if isinstance(value, str):
        try:
            count = int(value)
        except ValueError:
            count = None
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        got = count if isinstance(count, int) else repr(value)
        raise ThreadCountError(f"--threads: expected a count of CPU threads, at least 1 (leave the flag out for "
                               f"one per core), got {got}")
    return count


def limit_threads(threads: int | None) -> int:
    """Compute with ``threads`` CPU threads in torch and every BLAS/OpenMP pool of this process and its
    children; None: torch uses one thread per core and the pools keep their own setting. Returns torch's."""
    import torch

    if threads is None:
        count = max(1, os.cpu_count() or 1)
        torch.set_num_threads(count)
        return count
    threads = thread_count(threads)
    torch.set_num_threads(threads)
    os.environ.update({name: str(threads) for name in POOL_VARIABLES})
    if importlib.util.find_spec("threadpoolctl") is not None:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=threads)
    return threads
