"""How many CPU threads a process computes with: torch's intra-op pool, and the BLAS and OpenMP pools that
numpy, scipy and scikit-learn use (the probes' logistic regressions run there, not in torch).

``--threads 1`` on two processes beside each other must mean one core each. Setting torch's pool alone leaves
OpenBLAS and OpenMP at one thread per core, and where threads outnumber cores they spin-wait on each other. So
an explicit count also goes to the pools: to those already loaded through threadpoolctl (it comes with
scikit-learn, the ``eval`` extra), and to those loaded later, and to child processes, through the environment
variables the libraries read when they load.
"""

from __future__ import annotations

import importlib.util
import os

POOL_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
"""What OpenMP, OpenBLAS and MKL read for their thread count when they load."""


def limit_threads(threads: int | None) -> int:
    """Compute with ``threads`` CPU threads in torch and every BLAS/OpenMP pool of this process and its
    children; None or 0: torch uses one thread per core and the pools keep their own setting. Returns torch's."""
    import torch

    if not threads:
        count = max(1, os.cpu_count() or 1)
        torch.set_num_threads(count)
        return count
    torch.set_num_threads(threads)
    os.environ.update({name: str(threads) for name in POOL_VARIABLES})
    if importlib.util.find_spec("threadpoolctl") is not None:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=threads)
    return threads
