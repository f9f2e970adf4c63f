"""The one-shot GPU validation: prepared on the CPU machine, fired on a lent H200.

``carry`` builds the folder that travels with the checkout (wheels the device lacks, the corpus and
GLUE files) and prints the exact device calls; ``runner`` runs the stages there, each in its own
process (``stage_process``) with its own time budget; ``stages`` (smoke, gpu_check),
``attention_stage`` (flex vs SDPA at 8k) and ``claims`` are the stages, ``stage_io`` what
they hand the driver; ``report`` renders the results (and the GPU section of docs/results.md). ``program`` is the
one home of each stage's registration and budget, ``budget`` of the device program's arithmetic, ``wheel_check``
checks the carried wheels right after install.
``--toy`` runs the same code at toy size on the CPU (tests/experiments/test_device_check.py). Entry point:
``scripts/device_check.sh`` (``python -m experiments.device_check``); it imports only the library.
"""
