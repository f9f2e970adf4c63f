"""``python -m experiments.claims.ablations``."""

import sys

from .run import main

sys.exit(main())
