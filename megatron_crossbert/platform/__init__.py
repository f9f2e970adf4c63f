"""How the package runs on this machine: megatron-core on a CPU with gloo (cpu.py), joining the job and its
process groups (distributed.py), CPU thread counts (threads.py), stop signals (signals.py), peak memory
(peak.py), and megatron-core's import without the compiler stack on a CPU-only machine (eager_fusions.py).

Import from those modules: this face imports nothing, so that ``megatron_crossbert`` can install
``eager_fusions``' import hook at package import without importing torch.
"""
