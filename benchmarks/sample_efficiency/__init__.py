"""Sample-efficiency experiment; the code lives in ``megatron_crossbert.benchmarking.sample_efficiency``."""
