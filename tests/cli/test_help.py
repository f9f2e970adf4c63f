"""Every CLI's ``--help`` states each flag's default once.

argparse's ``ArgumentDefaultsHelpFormatter`` appends ``(default: X)`` to every help string; a help string
that already says its default then printed it twice ("(default: mean) (default: mean)").
``cli.DefaultsHelpFormatter`` adds it only where the help string does not. The parsers are built in this
process (no interpreter per CLI): the console scripts, ``tools/preprocess_data.py`` (crossbert-preprocess's
parser), the experiments, and ``scripts/device_check.sh`` (the device check's parser).
"""

from __future__ import annotations

import argparse
import importlib
import re

import pytest

PARSERS = ["megatron_crossbert.cli." + name for name in
           ("bench", "convert_hf", "finetune", "merge", "mteb", "plan", "pooler", "preprocess", "preprocess_datatrove",
            "pretrain", "probe", "results", "train_tokenizer")] + [
    "crossbert_demo.cli", "experiments.device_check.cli", "experiments.claims.__main__"]
DEFAULT = re.compile(r"\bdefault\b", re.IGNORECASE)


def help_strings(parser: argparse.ArgumentParser, prog: str):
    """(prog, flags, help as --help prints it) of every argument, subcommands included."""
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from help_strings(sub, f"{prog} {name}")
        elif action.help not in (None, argparse.SUPPRESS):
            yield prog, action.option_strings or [action.dest], formatter._expand_help(action)


@pytest.mark.parametrize("module", PARSERS)
def test_no_help_string_says_its_default_twice(module):
    parser = importlib.import_module(module).build_parser()
    doubled = [f"{prog} {'/'.join(flags)}: {text}" for prog, flags, text in help_strings(parser, parser.prog)
               if len(DEFAULT.findall(text)) > 1]
    assert doubled == []


def test_the_formatter_still_adds_a_default_the_help_does_not_say():
    from megatron_crossbert.cli import DefaultsHelpFormatter

    parser = argparse.ArgumentParser(formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--said", default="mean", help="pooling (default: mean)")
    parser.add_argument("--unsaid", default=3, help="folds")
    texts = {flags[0]: text for _, flags, text in help_strings(parser, "p")}
    assert texts["--said"] == "pooling (default: mean)" and texts["--unsaid"] == "folds (default: 3)"
