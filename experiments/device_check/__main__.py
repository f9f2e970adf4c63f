"""``python -m experiments.device_check {prepare,run,render}``; normally called through scripts/device_check.sh."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
