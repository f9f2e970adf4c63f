"""Progress for people and for batch systems: one helper every progress bar of the package goes through.

On a terminal a bar redraws itself in place (tqdm's ``\\r``). A batch system (SLURM, ``> log``, a pipe)
keeps every redraw, so a log would fill with thousands of states on one line. When the stream is not a
terminal, :func:`progress_bar` therefore writes a whole line now and then instead: at the start, at most
once every :data:`LOG_INTERVAL_S` seconds, and at the end. tqdm's own ``TQDM_MININTERVAL`` environment
variable still sets the interval.
"""

from __future__ import annotations

import os
import sys
from typing import IO

from tqdm.auto import tqdm

LOG_INTERVAL_S = 30.0
"""Seconds between two progress lines in a log file (tqdm's default on a terminal is 0.1)."""


class _LogLines(tqdm):
    """tqdm whose every refresh is one whole line, at most every ``mininterval`` seconds (no ``\\r``)."""

    def display(self, msg: str | None = None, pos: int | None = None) -> None:
        text = self.__str__() if msg is None else msg
        if text.strip():  # tqdm clears a bar with an empty message: a log keeps what it printed
            self.fp.write(text.rstrip() + "\n")
            self.fp.flush()

    def close(self) -> None:
        if not self.disable and not getattr(self, "_final_line", False):
            self._final_line = True
            self.display()
        super().close()


def _is_terminal(stream: IO | None) -> bool:
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or foreign stream
        return False


def progress_bar(iterable=None, **kwargs) -> tqdm:
    """``tqdm(iterable, **kwargs)`` on a terminal; on a file or a pipe, the same bar as a line now and then
    (it never leaves a half-drawn state behind, whatever ``leave`` says)."""
    if _is_terminal(kwargs.get("file")):
        return tqdm(iterable, **kwargs)
    interval = float(os.environ.get("TQDM_MININTERVAL", LOG_INTERVAL_S))
    kwargs.update(leave=False, dynamic_ncols=False, mininterval=interval, maxinterval=max(interval, 10.0))
    return _LogLines(iterable, **kwargs)
