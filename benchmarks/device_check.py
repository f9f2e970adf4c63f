"""The GPU validation script's driver (issue 13): ``prepare`` here, ``run`` on the device, ``render``.

Usage: ``python benchmarks/device_check.py {prepare,run,render} --help``; normally called through
``scripts/device_check.sh``, which also installs the carried wheels on the device.
Importable: ``megatron_crossbert.benchmarking.device``.
"""

import sys

from megatron_crossbert.benchmarking.device.cli import main

if __name__ == "__main__":
    sys.exit(main())
