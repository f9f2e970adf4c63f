"""``run_tokenizer`` loads a run's tokenizer once per process while the files a load reads hold the same bytes: a
file rewritten with other content of the same size and its mtime put back is loaded again, and a file touched
without a change is not (the key is ``content_identity``, never size and mtime)."""

from __future__ import annotations

import os
import shutil

import pytest

import megatron_crossbert.data.tokenizers.tokenizer as tokenizer_module
from megatron_crossbert.data.tokenizers.fingerprint import tokenizer_fingerprint
from tests.support.checkpoints import write_tokenizer


@pytest.fixture
def loads(monkeypatch) -> list[str]:
    """Every real load behind ``run_tokenizer``, in order (the cache starts and ends empty)."""
    calls: list[str] = []
    real = tokenizer_module.load_tokenizer
    monkeypatch.setattr(tokenizer_module, "load_tokenizer", lambda path: calls.append(str(path)) or real(path))
    tokenizer_module._cached_load.cache_clear()
    yield calls
    tokenizer_module._cached_load.cache_clear()


def _rewrite_in_place(path, content: bytes) -> None:
    """Other bytes, the same size, the old mtime: what a size-and-mtime stamp cannot see."""
    before = path.stat()
    assert len(content) == before.st_size and content != path.read_bytes()
    path.write_bytes(content)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def _swap_roles(path, first: bytes = b'"[PAD]"', second: bytes = b'"[UNK]"') -> bytes:
    """The file's bytes with two special tokens exchanged (equal lengths: the same size)."""
    return path.read_bytes().replace(first, b"\0").replace(second, first).replace(b"\0", second)


NAME_FILES = ("special_tokens_map.json", "tokenizer_config.json")


@pytest.mark.parametrize("changed", ["tokenizer.json", *NAME_FILES])
@pytest.mark.parametrize("given", ["directory", "tokenizer.json"])
def test_a_same_size_rewrite_with_the_old_mtime_is_loaded_again(tmp_path, loads, changed, given):
    """Each file a load reads, the tokenizer given as its directory or as its ``tokenizer.json`` (whose
    directory's configs name the special tokens)."""
    directory = write_tokenizer(tmp_path / "tok")
    path = directory if given == "directory" else directory / "tokenizer.json"
    if changed in NAME_FILES:  # the changed config alone names the roles
        (directory / next(name for name in NAME_FILES if name != changed)).unlink()
    content = (write_tokenizer(tmp_path / "reversed", reverse=True) / changed).read_bytes() \
        if changed == "tokenizer.json" else _swap_roles(directory / changed)
    first = tokenizer_module.run_tokenizer(path)
    assert tokenizer_module.run_tokenizer(path) is first and len(loads) == 1
    _rewrite_in_place(directory / changed, content)
    again = tokenizer_module.run_tokenizer(path)
    assert again is not first and len(loads) == 2
    if changed == "tokenizer.json":
        assert tokenizer_fingerprint(again) != tokenizer_fingerprint(first)
    else:
        assert (again.pad_id, again.unk_id) == (first.unk_id, first.pad_id)
    assert tokenizer_module.run_tokenizer(path) is again and len(loads) == 2


@pytest.mark.parametrize("calls", [1, 3])
def test_unchanged_bytes_load_once_whatever_the_mtime(tmp_path, loads, calls):
    directory = write_tokenizer(tmp_path / "tok")
    for index in range(calls):
        for item in directory.iterdir():
            os.utime(item, ns=(index + 1, index + 1))  # a touch, a copy with new times: the same content
        tokenizer_module.run_tokenizer(directory)
    assert len(loads) == 1


def test_each_path_and_content_is_its_own_entry_in_any_order(tmp_path, loads):
    """Two tokenizers alternated load once each; the same bytes copied elsewhere are another path (a load names
    its files, e.g. ``spm_model``), so loaded once more."""
    a, b = write_tokenizer(tmp_path / "a"), write_tokenizer(tmp_path / "b", reverse=True)
    for path in (a, b, a, b, a):
        tokenizer_module.run_tokenizer(path)
    assert loads == [str(a.resolve()), str(b.resolve())]
    copy = shutil.copytree(a, tmp_path / "copy")
    assert tokenizer_fingerprint(tokenizer_module.run_tokenizer(copy)) == tokenizer_fingerprint(
        tokenizer_module.run_tokenizer(a)) and len(loads) == 3
