"""megatron-crossbert: CrossBERT text-encoder pretraining on megatron-core."""

__version__ = "0.1.0"
