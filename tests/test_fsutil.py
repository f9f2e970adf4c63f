"""Files a run leaves: a killed preprocess's temporaries are removed by the next run (and nothing
else is), and outputs meant to be shared get the modes the umask asks for.

Without owner names a SIGKILLed ``crossbert-preprocess`` left ``<prefix>.tmp-<pid>.bin`` behind for good
(a pid alone cannot say whose file it is on a shared filesystem), and an HF export was created 0700
with ``model.safetensors`` 0600 (``mkdtemp``, safetensors), like every ``run_config.json`` (``mkstemp``).
"""

from __future__ import annotations

import logging
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from megatron_crossbert import fsutil
from megatron_crossbert.fsutil import remove_stale_temporaries, temp_sibling
from tests.support import REPO_ROOT



def _name_of_a_dead_process(target: str) -> str:
    """``temp_sibling(target)`` as a process that has since exited made it."""
    done = subprocess.run([sys.executable, "-c", f"from megatron_crossbert.fsutil import temp_sibling; "
                                                 f"print(temp_sibling({target!r}))"],
                          capture_output=True, text=True, check=True, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    return done.stdout.strip()


def test_only_dead_runs_temporaries_of_these_outputs_are_removed(tmp_path, caplog):
    prefix = str(tmp_path / "corpus_text_document")
    dead_tag = _name_of_a_dead_process(prefix)
    atomic = str(tmp_path / f".corpus_text_document.idx{dead_tag[len(prefix):]}-x1y2")  # atomic_open's mkstemp
    dead = [dead_tag + ".bin", dead_tag + ".idx", atomic]
    keep = [temp_sibling(prefix) + ".bin",  # a live run (this one)
            _name_of_a_dead_process(str(tmp_path / "other_text_document")) + ".bin",  # another output
            f"{prefix}.tmp-node42-123-456.bin",  # another host: whose pid? unknowable here
            f"{prefix}.tmp-backup.bin", f"{prefix}.tmp-10644.bin", prefix + ".bin"]  # not ours to judge
    reused = temp_sibling(prefix).rsplit("-", 1)[0] + "-1.idx"  # our pid, another start time: pid reused
    for path in dead + keep + [reused]:
        Path(path).write_text("x")
    with caplog.at_level(logging.WARNING, logger=fsutil.__name__):
        removed = remove_stale_temporaries([prefix + ".bin", prefix + ".idx"])
    assert sorted(map(str, removed)) == sorted(dead + [reused])
    assert all(Path(path).exists() for path in keep)
    assert "left by a killed run" in caplog.text and "node42" in caplog.text


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pid start times come from /proc")
def test_a_sigkilled_preprocess_leaves_temporaries_that_the_next_run_removes(tmp_path):
    from megatron_crossbert.data.preprocessing import preprocess as pp
    from tests.support.synthetic_text import train_byte_bpe, write_sized_corpus

    corpus, tok = write_sized_corpus(tmp_path / "corpus.jsonl.gz", 3), train_byte_bpe(tmp_path)
    argv = ["--input", str(corpus), "--output-prefix", str(tmp_path / "out"), "--tokenizer", str(tok), "--no-progress"]
    run = subprocess.Popen([sys.executable, "-m", "megatron_crossbert.cli.preprocess", *argv],
                           env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)), stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not list(tmp_path.glob("out_text_document.tmp-*")):
        assert run.poll() is None and time.time() < deadline, "the run ended before it wrote a temporary"
        time.sleep(0.01)
    run.send_signal(signal.SIGKILL)
    run.wait()
    left = sorted(tmp_path.glob("out_text_document.tmp-*"))
    assert left and not (tmp_path / "out_text_document.idx").exists()
    report = pp.preprocess(pp.PreprocessOptions(inputs=[str(corpus)], output_prefix=str(tmp_path / "out"),
                                                tokenizer=str(tok), progress=False))
    assert report["documents_written"] > 0 and not any(path.exists() for path in left)
    assert not list(tmp_path.glob("*.tmp-*"))


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("umask, dir_mode, file_mode", [(0o022, 0o755, 0o644), (0o077, 0o700, 0o600),
                                                       (0o002, 0o775, 0o664)])
def test_exports_and_atomic_writes_honour_the_umask(tmp_path, umask, dir_mode, file_mode):
    import torch
    from safetensors.torch import save_file

    from megatron_crossbert.convert.artifacts import staged_output

    old = os.umask(umask)
    try:
        with staged_output(tmp_path / "hf", force=False) as stage:
            save_file({"w": torch.zeros(2)}, str(stage / "model.safetensors"))
            (stage / "1_Pooling").mkdir()
            fsutil.atomic_write_text(stage / "1_Pooling" / "config.json", "{}")
    finally:
        os.umask(old)
    out = tmp_path / "hf"
    assert _mode(out) == dir_mode and _mode(out / "1_Pooling") == dir_mode
    assert _mode(out / "model.safetensors") == file_mode and _mode(out / "1_Pooling" / "config.json") == file_mode
