"""megatron-crossbert: CrossBERT text-encoder pretraining on megatron-core."""

from megatron_crossbert.platform.eager_fusions import install as _install_eager_fusions

__version__ = "0.1.0"

_install_eager_fusions()  # before anything of ours imports megatron-core (eager_fusions.py says why)
