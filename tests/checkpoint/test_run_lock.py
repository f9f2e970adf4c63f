"""One run per save directory: a second run is refused naming the first; a dead holder is taken over.

Without the lock nothing refuses a second training run started into the same ``--save``: one of them
died at a random save with a misleading ``No such file ... .metadata.tmp``, the directory could end up
holding checkpoints of two runs, and a second launch could resume from the first one's live
checkpoint. The end-to-end check (two ``crossbert-pretrain`` processes) is in ``checkpoint/test_processes.py``.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from megatron_crossbert.checkpoint import run_lock
from megatron_crossbert.checkpoint.errors import RunLockedError
from megatron_crossbert.checkpoint.run_lock import LOCK_FILE, RunLock, read_holder, run_lock_for
from tests.support import REPO_ROOT

HOLD = """
import sys, time
from megatron_crossbert.checkpoint.run_lock import RunLock
lock = RunLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(120)
"""


def _holder_process(save: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(save)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_run_is_refused_naming_the_holder_and_a_sigkilled_one_is_taken_over(tmp_path, caplog):
    first = _holder_process(tmp_path)
    try:
        with pytest.raises(RunLockedError) as info:
            RunLock(tmp_path).acquire()
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    message = str(info.value)
    assert message.startswith(f"{tmp_path / LOCK_FILE}: another training run uses this save directory (host ")
    assert f"pid {first.pid}, started 20" in message and "\n" not in message
    with caplog.at_level(logging.WARNING, logger=run_lock.__name__):
        with RunLock(tmp_path) as lock:  # the kernel dropped the dead holder's flock
            assert lock.holder.pid == os.getpid()
    assert "taking over the lock of a run that is gone (host" in caplog.text and f"pid {first.pid}" in caplog.text


def test_release_lets_the_next_run_start_quietly_and_keeps_the_file(tmp_path, caplog):
    with RunLock(tmp_path):
        pass
    assert read_holder(tmp_path / LOCK_FILE).released
    with caplog.at_level(logging.WARNING, logger=run_lock.__name__):
        with RunLock(tmp_path):
            pass
    assert caplog.text == ""
    assert (tmp_path / LOCK_FILE).exists()  # never deleted: deleting races with a second opener


def test_a_second_lock_in_the_same_process_is_refused(tmp_path):
    """flock belongs to the open file: a second RunLock in one process conflicts like another process."""
    with RunLock(tmp_path):
        with pytest.raises(RunLockedError):
            RunLock(tmp_path).acquire()


def _foreign_record(save: Path, heartbeat_age: float) -> None:
    (save / LOCK_FILE).write_text(json.dumps({
        "host": "other-node-17", "pid": 4242, "pid_start": "1", "started_utc": "2026-12-01T00:00:00Z",
        "heartbeat": time.time() - heartbeat_age, "released": False}))


def test_another_hosts_heartbeat_decides_where_flock_is_node_local(tmp_path, caplog):
    """Lustre localflock, NFS nolock: the kernel lock does not cross hosts, the record does."""
    _foreign_record(tmp_path, heartbeat_age=5)
    with pytest.raises(RunLockedError, match=r"host other-node-17, pid 4242, started 2026-12-01T00:00:00Z, "
                                             r"last heartbeat [5-9] s ago"):
        RunLock(tmp_path).acquire()
    _foreign_record(tmp_path, heartbeat_age=run_lock.STALE_AFTER_S + 1)
    with caplog.at_level(logging.WARNING, logger=run_lock.__name__):
        with RunLock(tmp_path):
            pass
    assert "taking over the lock of a run that is gone (host other-node-17" in caplog.text


def test_a_filesystem_without_flock_falls_back_to_the_record(tmp_path, monkeypatch, caplog):
    def no_flock(fd, op):
        if op & run_lock.fcntl.LOCK_UN:
            return None
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(run_lock.fcntl, "flock", no_flock)
    first = RunLock(tmp_path)
    with caplog.at_level(logging.WARNING, logger=run_lock.__name__):
        first.acquire()
    try:
        record = read_holder(tmp_path / LOCK_FILE)
        monkeypatch.setattr(run_lock.os, "getpid", lambda: record.pid + 1)  # another process of this host
        with pytest.raises(RunLockedError, match=f"pid {record.pid}"):
            RunLock(tmp_path).acquire()
    finally:
        monkeypatch.undo()
        first.release()
    assert "this filesystem has no flock; relying on the holder record only" in caplog.text


def test_the_heartbeat_thread_refreshes_the_record(tmp_path, monkeypatch):
    monkeypatch.setattr(run_lock, "HEARTBEAT_S", 0.05)
    with RunLock(tmp_path):
        first = read_holder(tmp_path / LOCK_FILE).heartbeat
        time.sleep(0.3)
        assert read_holder(tmp_path / LOCK_FILE).heartbeat > first


def test_only_rank_zero_of_a_saving_run_takes_it(tmp_path, monkeypatch):
    from tests.support.training import tiny_config

    cfg = tiny_config("crossbert", "unused", tmp_path / "save")
    monkeypatch.setenv("RANK", "1")
    with run_lock_for(cfg) as lock:
        assert lock is None and not (tmp_path / "save" / LOCK_FILE).exists()
    monkeypatch.setenv("RANK", "0")
    with run_lock_for(cfg) as lock:
        assert lock.path == tmp_path / "save" / LOCK_FILE
    with run_lock_for(tiny_config("crossbert", "unused")) as lock:
        assert lock is None


def test_a_record_read_while_its_holder_rewrites_it_is_read_again(tmp_path, monkeypatch):
    """The holder truncates, then writes: a reader in between reads again rather than see no holder."""
    path = tmp_path / LOCK_FILE
    path.write_text("")
    reads = []
    real_read = type(path).read_text

    def read_text(self, *args, **kwargs):
        reads.append(self)
        if len(reads) == 2:  # the holder's write lands between the first read and the second
            self.write_text('{"host": "h", "pid": 1, "pid_start": "", "started_utc": "t", "heartbeat": 1.0}')
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(type(path), "read_text", read_text)
    holder = read_holder(path)
    assert holder is not None and holder.pid == 1 and len(reads) == 2
    path.write_text("")
    assert read_holder(path) is None  # empty on every try: a crash between open and write
    path.unlink()
    assert read_holder(path) is None
