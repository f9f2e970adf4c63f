"""Every ``--threads`` flag parses with ``platform.threads.thread_count``: 0 and negative counts are refused in one
``error:`` line before anything runs (a negative count used to crash in ``torch.set_num_threads``, and 0 was
silently read as one thread per core)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re

import pytest

from megatron_crossbert.platform.threads import ThreadCountError, thread_count
from tests.support import REPO_ROOT

SOURCES = ("megatron_crossbert", "experiments", "examples")


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _module(name: str):
    return _example(name.split(":")[1]) if name.startswith("examples:") else importlib.import_module(name)


CLIS = [("megatron_crossbert.cli.bench", ["throughput"]), ("megatron_crossbert.cli.bench", ["export-speed"]),
        ("megatron_crossbert.cli.bench", ["checkpoint"]), ("megatron_crossbert.cli.finetune", []),
        ("experiments.claims.__main__", []), ("experiments.claims.sweep.run", []), ("experiments.claims.ablations.run", []),
        ("examples:sentence_embedding_finetune", [])]
"""Each parser with a ``--threads`` flag and the words before it (a subcommand)."""


def _threads_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    found = [action for action in parser._actions if "--threads" in action.option_strings]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found += [a for sub in action.choices.values() for a in _threads_actions(sub)]
    return found


def test_every_threads_flag_in_the_repository_parses_with_thread_count():
    """No parser takes ``--threads`` as a bare int: every definition in the sources names the one type."""
    pattern = re.compile(r"add_argument\(\s*\"--threads\"(?P<rest>[^)]*)")
    found = []
    for root in SOURCES:
        for path in sorted((REPO_ROOT / root).rglob("*.py")):
            for match in pattern.finditer(path.read_text()):
                found.append(path.relative_to(REPO_ROOT).as_posix())
                assert "type=thread_count" in match.group("rest"), path
    assert "experiments/claims/cli.py" in found  # the pattern reads the definitions (one serves two commands)
    for name, _ in CLIS:
        actions = _threads_actions(_module(name).build_parser())
        assert actions and all(action.type is thread_count for action in actions), name


@pytest.mark.parametrize("value", ["0", "-1", "-3"])
@pytest.mark.parametrize("name,words", CLIS)
def test_parsing_refuses_a_count_below_one(name, words, value):
    with pytest.raises(ThreadCountError, match=rf"--threads: .* got {value}$"):
        _module(name).build_parser().parse_args([*words, "--threads", value])


@pytest.mark.parametrize("value", ["-1", "0"])
@pytest.mark.parametrize("name,words", [("megatron_crossbert.cli.bench", ["throughput"]),
                                        ("megatron_crossbert.cli.bench", ["checkpoint"]),
                                        ("experiments.claims.__main__", []),
                                        ("examples:sentence_embedding_finetune", [])])
def test_the_refusal_is_one_error_line_and_exit_2(name, words, value, capsys):
    assert _module(name).main([*words, "--threads", value]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: --threads: expected a count of CPU threads, at least 1 (leave the flag out for one per "
                   f"core), got {value}")
