"""The sample-efficiency study: a small-scale replication of CrossBERT's sample-efficiency claim.

Run it from the repository root with ``python -m experiments.sample_efficiency`` (``--help``); see
README.md. It imports only the library (``megatron_crossbert``), never another experiment.
"""
