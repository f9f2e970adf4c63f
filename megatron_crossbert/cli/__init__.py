"""Console entry points: thin argparse front ends over importable functions."""

import warnings


def quiet_library_warnings() -> None:
    """Hide torch/megatron/transformers deprecation chatter so progress and results stay readable.

    Only warning categories that libraries use for API churn are silenced; errors are untouched.
    """
    for category in (DeprecationWarning, FutureWarning, UserWarning, SyntaxWarning):
        warnings.filterwarnings("ignore", category=category)
