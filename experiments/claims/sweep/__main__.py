"""``python -m experiments.claims.sweep``."""

import sys

from .run import main

sys.exit(main())
