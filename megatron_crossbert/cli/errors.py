"""One way for every CLI to fail: ``error: <file>: <what is wrong>`` on one line, exit status 2.

Every ``megatron_crossbert.cli.*.main`` is decorated with :func:`cli_main`. Errors a user can cause
(a bad checkpoint, dataset, tokenizer, config or path) surface as the project's own exception types
(every class defined under ``megatron_crossbert``: CheckpointError, ConversionError,
NonFiniteLossError, ...), ``ValueError`` (configs; CorruptDatasetError, BadInputError and
TokenizerMismatchError derive from it) or ``OSError`` (missing files, existing outputs). Their
message already names the file, so the traceback adds nothing for a user; ``--debug`` (any
position) or ``CROSSBERT_DEBUG=1`` re-raises to show it. Anything else is a bug and keeps its
traceback. Under torchrun every rank fails the same way, so only rank 0 prints; every rank exits 2.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Callable

DEBUG_ENV = "CROSSBERT_DEBUG"
DEBUG_FLAG = "--debug"
EXIT_USER_ERROR = 2


def add_debug_flag(parser) -> None:
    """List --debug in --help (cli_main strips it from argv before the parser runs)."""
    parser.add_argument(DEBUG_FLAG, action="store_true",
                        help=f"show the full traceback on errors (also: {DEBUG_ENV}=1)")


def is_user_error(err: BaseException) -> bool:
    """True for the errors whose message is the whole story (see the module docstring)."""
    if isinstance(err, (ValueError, OSError)):
        return True
    return isinstance(err, Exception) and type(err).__module__.startswith("megatron_crossbert.")


def one_line(err: BaseException) -> str:
    """The message on one line (multi-line messages, e.g. a list of config differences, joined by '; ')."""
    parts = [line.strip() for line in str(err).splitlines() if line.strip()]
    return "; ".join(parts) or type(err).__name__


def _rank() -> int:
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0") or 0)


def _debug_requested(argv: list[str]) -> bool:
    return DEBUG_FLAG in argv or os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")


def cli_main(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """Decorate ``main(argv) -> exit status`` so user errors print one line and return 2."""

    @functools.wraps(main)
    def wrapped(argv: list[str] | None = None) -> int:
        args = list(sys.argv[1:] if argv is None else argv)
        debug = _debug_requested(args)
        try:
            return main([a for a in args if a != DEBUG_FLAG])
        except Exception as err:
            if debug or not is_user_error(err):
                raise
            if _rank() == 0:
                print(f"error: {one_line(err)}", file=sys.stderr, flush=True)
            return EXIT_USER_ERROR

    return wrapped
