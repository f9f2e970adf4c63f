"""Blend files and weighted --data-path entries that name a missing shard, disagree with their totals or list a
shard twice: refused in one line naming the blend file and the entry, wherever training opens them first
(the data record of every start, the dataset). Generated corpus and the session's BPE tokenizer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from megatron_crossbert.checkpoint.data_record import run_blend
from megatron_crossbert.cli.merge import main as merge_main
from megatron_crossbert.config import DataConfig, ModelConfig, RunConfig
from megatron_crossbert.data.indexed.blend_file import blend_files, read_blend
from megatron_crossbert.data.preprocessing.preprocess import PreprocessOptions, preprocess
from tests.support.synthetic_text import synthetic_documents, write_jsonl

SHARDS = 4


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory, bpe_tokenizer) -> Path:
    root = tmp_path_factory.mktemp("blend")
    for i in range(SHARDS):
        path = write_jsonl(root / f"in{i}.jsonl", synthetic_documents(7 + 5 * i, seed=60 + i, max_sentences=3))
        preprocess(PreprocessOptions(inputs=[str(path)], output_prefix=str(root / "shards" / f"{i:05d}"),
                                     tokenizer=str(bpe_tokenizer), progress=False))
    assert merge_main(["--input", str(root / "shards"), "--blend-file", str(root / "shards" / "c.blend.json")]) == 0
    return root / "shards"


def _copy(shard_dir: Path, dest: Path) -> Path:
    shutil.copytree(shard_dir, dest)
    return dest / "c.blend.json"


def _edit(blend: Path, change) -> None:
    payload = json.loads(blend.read_text())
    change(payload)
    blend.write_text(json.dumps(payload))


def _cfg(data_path: list) -> RunConfig:
    return RunConfig(model=ModelConfig(arch="crossbert", vocab_size=512, max_position_embeddings=128),
                     data=DataConfig(data_path=data_path, seq_length=32))


def _one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and "Errno" not in message, message
    return message


@pytest.mark.parametrize("entry, lost", [(4, ".bin"), (2, ".idx"), (1, ".bin")])
def test_a_blend_file_naming_a_missing_shard_names_the_file_and_the_entry(shard_dir, tmp_path, entry, lost):
    blend = _copy(shard_dir, tmp_path / "s")
    missing = blend.parent / f"{entry - 1:05d}_text_document{lost}"
    missing.unlink()
    for open_it in (read_blend, blend_files, lambda path: run_blend(_cfg([path]))):
        with pytest.raises(FileNotFoundError) as excinfo:
            open_it(str(blend))
        message = _one_line(excinfo)
        assert message.startswith(f"{blend}: entry {entry}: ") and str(missing) in message


@pytest.mark.parametrize("position", [1, 3])
def test_a_weighted_data_path_naming_a_missing_shard_is_one_line(shard_dir, tmp_path, position):
    folder = _copy(shard_dir, tmp_path / "s").parent
    prefixes = [str(folder / f"{i:05d}_text_document") for i in range(SHARDS)]
    (folder / f"{position:05d}_text_document.bin").unlink()
    with pytest.raises(FileNotFoundError) as excinfo:
        run_blend(_cfg([x for p in prefixes for x in (0.25, p)]))
    message = _one_line(excinfo)
    assert message.startswith("data.data_path: ") and f"{prefixes[position]}.bin" in message


@pytest.mark.parametrize("total, delta", [("documents", 1), ("tokens", -3)])
def test_a_blend_file_whose_totals_disagree_with_its_entries_is_refused(shard_dir, tmp_path, total, delta):
    blend = _copy(shard_dir, tmp_path / "s")
    _edit(blend, lambda payload: payload.update({total: payload[total] + delta}))
    with pytest.raises(ValueError, match=f"{blend}: says .* {total} in all, but its entries add up to") as excinfo:
        read_blend(str(blend))
    _one_line(excinfo)


@pytest.mark.parametrize("first, again", [(0, 3), (2, 1)])
def test_a_blend_file_listing_a_shard_twice_is_refused(shard_dir, tmp_path, first, again):
    blend = _copy(shard_dir, tmp_path / "s")

    def duplicate(payload):
        entry = dict(payload["datasets"][first])
        if again % 2:  # the same shard by another spelling of its path
            entry["prefix"] = str(blend.parent / "." / entry["prefix"])
        payload["datasets"].insert(again, entry)
        payload["documents"] += entry["documents"]
        payload["tokens"] += entry["tokens"]

    _edit(blend, duplicate)
    low, high = sorted((first + 1 + (again <= first), again + 1))
    with pytest.raises(ValueError, match=f"entries {low} and {high} name the same shard") as excinfo:
        blend_files(str(blend))
    _one_line(excinfo)
