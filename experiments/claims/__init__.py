"""The claims study: the paper's three claims (frozen representations, 2x sample efficiency, scaling) with
seeds and 95% intervals, at any budget a named plan or a user's plan file sets.

Run it from the repository root with ``python -m experiments.claims`` (``--help``); see
README.md and docs/performance.md. It imports only the library (``megatron_crossbert``), never another experiment.
"""
