"""``progress.progress_bar``: a bar redrawn in place on a terminal, whole lines now and then in a log file."""

from __future__ import annotations

import io

from megatron_crossbert.progress import progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_file_gets_whole_lines_and_the_last_state(monkeypatch):
    monkeypatch.setenv("TQDM_MININTERVAL", "0")  # every update is due: the worst case for a log
    log = io.StringIO()
    for _ in progress_bar(range(50), file=log, desc="encoding"):
        pass
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and len(lines) == 52  # the start, every update, the end once more
    assert lines[0].startswith("encoding:   0%") and lines[-1].startswith("encoding: 100%|")


def test_a_log_file_is_quiet_between_intervals():
    log = io.StringIO()
    with progress_bar(total=1000, file=log, desc="steps") as bar:
        for _ in range(1000):
            bar.update(1)
    assert [line.split("|")[0] for line in log.getvalue().splitlines()] == ["steps:   0%", "steps: 100%"]


def test_a_terminal_keeps_the_redrawn_bar(monkeypatch):
    monkeypatch.setenv("TQDM_MININTERVAL", "0")
    screen = _Terminal()
    for _ in progress_bar(range(5), file=screen, leave=False):
        pass
    assert screen.getvalue().count("\r") >= 2 and "\n" not in screen.getvalue()  # redrawn in place
