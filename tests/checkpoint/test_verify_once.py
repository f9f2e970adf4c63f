"""Verify once: every start resolves its checkpoint reference once and parses run_config.json once.

A resolution is a call into one of the functions that turn a reference into a directory
(``directories.resolve_checkpoint_dir``, ``directories.resolve_latest`` and the ``resume_from`` search
``start_guard._explicit_source``); nested calls count as one, since ``resolve_checkpoint_dir``
follows 'latest' itself. A parse is a ``RunConfig.load_json`` of a ``run_config.json``. Calls are
counted by code object (``sys.setprofile``), so an import under another name cannot hide one.
Before the checkpoint package (main at 56862ce) the same spy counted 5 resolutions and 3 parses per
resume, 5 and 2 per init_from, 2 and 1 per export and 3 and 1 per evaluation.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.conversion import make_tokenizer
from tests.support.training import tiny_config, write_corpus


@contextmanager
def count_reads():
    """Yield a dict that counts outermost resolutions and run_config.json parses while active."""
    from megatron_crossbert.checkpoint import directories, start_guard
    from megatron_crossbert.config import RunConfig

    resolvers = {directories.resolve_checkpoint_dir.__code__, directories.resolve_latest.__code__,
                 start_guard._explicit_source.__code__}
    parse = RunConfig.load_json.__func__.__code__
    counts = {"resolutions": 0, "run_config_parses": 0}
    depth = 0

    def profile(frame, event, arg):
        nonlocal depth
        if frame.f_code in resolvers and event in ("call", "return"):
            counts["resolutions"] += event == "call" and depth == 0
            depth += 1 if event == "call" else -1
        elif frame.f_code is parse and event == "call" and Path(frame.f_locals["path"]).name == "run_config.json":
            counts["run_config_parses"] += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield counts
    finally:
        sys.setprofile(previous)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(work dir, corpus prefix, tokenizer dir) with a 2-step checkpoint under work/ckpt."""
    from megatron_crossbert.platform import distributed as platform
    from megatron_crossbert.training import train

    work = tmp_path_factory.mktemp("verify_once")
    corpus, tokenizer = write_corpus(work / "corpus"), make_tokenizer(work / "tok", num_words=123)
    train(tiny_config("crossbert", corpus, work / "ckpt", training__train_iters=2, data__tokenizer=str(tokenizer)))
    platform.destroy()
    return work, corpus, tokenizer


STARTS = {
    "resume from save_dir": dict(save="ckpt"),
    "resume from load_dir": dict(checkpoint__load_dir="ckpt"),
    "resume_from": dict(save="ckpt", checkpoint__resume_from="iter_0000002"),
    "init_from": dict(checkpoint__init_from="ckpt"),
}


@pytest.mark.slow
@pytest.mark.parametrize("start", STARTS)
def test_a_training_start_resolves_and_parses_once(trained, start):
    from megatron_crossbert.platform import distributed as platform
    from megatron_crossbert.training.setup import build_session

    work, corpus, tokenizer = trained
    extra = {key: str(work / value) if key != "checkpoint__resume_from" else value
             for key, value in STARTS[start].items() if key != "save"}
    save = work / STARTS[start]["save"] if "save" in STARTS[start] else None
    run_cfg = tiny_config("crossbert", corpus, save, training__train_iters=2, data__tokenizer=str(tokenizer), **extra)
    with count_reads() as counts:
        session = build_session(run_cfg)
    platform.destroy()
    assert counts == {"resolutions": 1, "run_config_parses": 1}
    if start == "init_from":
        assert session.progress.iteration == 0 and session.resumed_from is None
    else:
        assert session.progress.iteration == 2 and session.resumed_from == work / "ckpt" / "iter_0000002"


@pytest.mark.slow
def test_export_and_evaluation_resolve_and_parse_once(trained):
    from megatron_crossbert.convert import export_to_hf
    from megatron_crossbert.evaluation.encoders import resolve_model

    work, _, _ = trained
    with count_reads() as export:
        export_to_hf(work / "ckpt", work / "hf")
    with count_reads() as evaluation:  # probe and MTEB resolve native checkpoints through resolve_model
        resolved = resolve_model(work / "ckpt", cache_dir=work / "cache")
    assert (work / "hf" / "config.json").is_file() and Path(resolved.hf_path, "config.json").is_file()
    assert export == evaluation == {"resolutions": 1, "run_config_parses": 1}
