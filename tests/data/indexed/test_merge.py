"""crossbert-merge and blend files: Megatron-LM's merge bytes, refused mismatches, and a blend that trains
exactly as the merge would (same samples, same order). Generated corpus and the session's BPE tokenizer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from megatron_crossbert.cli.merge import main as merge_main
from megatron_crossbert.config import DataConfig, MaskingConfig, ModelConfig, RunConfig
from megatron_crossbert.data.datasets.build import build_datasets
from megatron_crossbert.data.datatrove.shards import contiguous_shard, sealed_prefixes
from megatron_crossbert.data.indexed.blend_file import blend_files, read_blend
from megatron_crossbert.data.indexed.writer import IndexedWriter
from megatron_crossbert.data.preprocessing.preprocess import PreprocessOptions, preprocess
from megatron_crossbert.data.tokenizers.tokenizer import load_tokenizer
from tests.support.synthetic_text import synthetic_documents, write_jsonl


@pytest.fixture(scope="module")
def shards(tmp_path_factory, bpe_tokenizer):
    """Three shard prefixes (one input file each) in ``root/shards`` and one run over all three files."""
    root = tmp_path_factory.mktemp("merge")
    files = [str(write_jsonl(root / f"in{i}.jsonl", synthetic_documents(40 + 25 * i, seed=10 + i))) for i in range(3)]
    for i, path in enumerate(files):
        preprocess(PreprocessOptions(inputs=[path], output_prefix=str(root / "shards" / f"{i:05d}"),
                                     tokenizer=str(bpe_tokenizer), append_eod=True, progress=False))
    preprocess(PreprocessOptions(inputs=files, output_prefix=str(root / "one"), tokenizer=str(bpe_tokenizer),
                                 append_eod=True, progress=False))
    return root


def _copy_shards(shards: Path, dest: Path) -> Path:
    shutil.copytree(shards / "shards", dest)
    return dest


def test_merge_cli_is_one_runs_bytes(shards, tmp_path, capsys):
    assert merge_main(["--input", str(shards / "shards"), "--output-prefix", str(tmp_path / "m"), "--no-progress"]) == 0
    for ext in (".bin", ".idx", ".tokenizer.json"):
        assert (tmp_path / f"m{ext}").read_bytes() == (shards / f"one_text_document{ext}").read_bytes()
    assert "merged 3 prefixes" in capsys.readouterr().out


def test_merge_refuses_existing_outputs_and_force_moves_them_aside(shards, tmp_path, capsys):
    args = ["--input", str(shards / "shards"), "--output-prefix", str(tmp_path / "m"), "--no-progress"]
    assert merge_main(args) == 0
    assert merge_main(args) == 2
    assert "exists; refusing to overwrite" in capsys.readouterr().err
    assert merge_main(args + ["--force"]) == 0
    assert len(list(tmp_path.glob("m.idx.replaced-*"))) == 1


@pytest.mark.parametrize("spoil, message", [
    ("dtype", "token dtype int32, but"),
    ("vocab", "vocabulary of 999 tokens, but"),
    ("fingerprint", "tokenizer record sha256:0000000000000000"),
    ("record", "tokenizer.json is missing, but"),
    ("truncated", "truncated or mismatched .bin/.idx pair"),
])
def test_mismatched_shards_are_refused_in_one_line(shards, tmp_path, capsys, spoil, message):
    folder = _copy_shards(shards, tmp_path / "in")
    prefix = folder / "00001_text_document"
    record = Path(f"{prefix}.tokenizer.json")
    if spoil == "dtype":
        writer = IndexedWriter(f"{prefix}.bin", dtype=np.int32)
        writer.add_document(np.arange(6, 20), [14])
        writer.finalize(f"{prefix}.idx")
    elif spoil in ("vocab", "fingerprint"):
        payload = json.loads(record.read_text())
        payload["vocab_size" if spoil == "vocab" else "fingerprint"] = 999 if spoil == "vocab" else "sha256:" + "0" * 16
        record.write_text(json.dumps(payload))
    elif spoil == "record":
        record.unlink()
    else:
        with open(f"{prefix}.bin", "r+b") as handle:
            handle.truncate(10)
    assert merge_main(["--input", str(folder), "--output-prefix", str(tmp_path / "m"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and message in err
    assert not list(tmp_path.glob("m*"))


def test_unfinished_temporaries_are_never_merged(shards, tmp_path):
    folder = _copy_shards(shards, tmp_path / "in")
    for ext in (".bin", ".idx"):  # what a task killed between its .idx and its rename leaves
        shutil.copy(folder / f"00002_text_document{ext}", folder / f"00003_text_document.tmp-host-12-34{ext}")
    assert [Path(p).name for p in sealed_prefixes(folder)] == [f"{i:05d}_text_document" for i in range(3)]


def _samples(prefix: str, tok, n: int = 40) -> list[dict]:
    cfg = RunConfig(model=ModelConfig(arch="crossbert", vocab_size=512, max_position_embeddings=128),
                    masking=MaskingConfig(seed=11), data=DataConfig(data_path=[prefix], seq_length=32, split="8,2,0"))
    train, valid, _ = build_datasets(cfg, (n, 8, 0), tokenizer=tok)
    return [train[i] for i in range(n)] + [valid[i] for i in range(8)]


def test_a_blend_file_trains_as_the_merge(shards, tmp_path, bpe_tokenizer):
    blend = tmp_path / "c.blend.json"
    assert merge_main(["--input", str(shards / "shards"), "--blend-file", str(blend)]) == 0
    assert json.loads(blend.read_text())["datasets"][0]["prefix"].startswith("/")  # outside its folder: absolute
    one_run = json.loads((shards / "one_text_document.tokenizer.json").read_text())
    one_run.pop("content")  # a pair's content fingerprint; a blend is many pairs, each checked by its own record
    assert json.loads(Path(f"{blend}.tokenizer.json").read_text()) == one_run
    tok = load_tokenizer(bpe_tokenizer)
    merged, blended = _samples(str(shards / "one_text_document"), tok), _samples(str(blend), tok)
    for a, b in zip(merged, blended, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert len(blend_files(str(blend))) == 1 + 2 * 3
    from megatron_crossbert.checkpoint.data_record import dataset_files

    assert dataset_files(str(blend), static=False) == blend_files(str(blend))  # a resume compares the shards too


def test_a_blend_file_moves_with_its_shards_and_refuses_a_changed_shard(shards, tmp_path):
    folder = _copy_shards(shards, tmp_path / "in")
    assert merge_main(["--input", str(folder), "--blend-file", str(folder / "c.blend.json")]) == 0
    moved = folder.rename(tmp_path / "moved")
    assert len(read_blend(str(moved / "c.blend.json")).shards) == 3  # relative paths inside the folder
    shutil.copy(moved / "00000_text_document.bin", moved / "00001_text_document.bin")
    shutil.copy(moved / "00000_text_document.idx", moved / "00001_text_document.idx")
    with pytest.raises(ValueError, match="remake the blend file"):
        read_blend(str(moved / "c.blend.json"))
    Path(f"{moved / 'c.blend.json'}.tokenizer.json").unlink()  # the blend's own record must match its shards'
    with pytest.raises(ValueError, match="does not match the tokenizer record"):
        read_blend(str(moved / "c.blend.json"))


@pytest.mark.parametrize("sizes, tasks", [([5, 1, 1, 1, 1, 1], 2), ([1] * 7, 3), ([3, 0, 9], 5), ([4], 1)])
def test_contiguous_shards_cover_the_files_in_order(sizes, tasks):
    ranges = [contiguous_shard(sizes, r, tasks) for r in range(tasks)]
    assert [i for r in ranges for i in r] == list(range(len(sizes)))
    if len(sizes) >= tasks and max(sizes) <= 2 * min(max(s, 1) for s in sizes):
        assert all(len(r) for r in ranges)  # similar sizes: every task gets files


def test_multimodal_and_missing_outputs_are_refused(shards, capsys):
    assert merge_main(["--input", str(shards / "shards"), "--multimodal", "--output-prefix", "x"]) == 2
    assert merge_main(["--input", str(shards / "shards")]) == 2
    err = capsys.readouterr().err
    assert "--multimodal" in err and "--output-prefix: give it, --blend-file, or both" in err


def test_a_folder_of_several_keys_is_merged_one_key_at_a_time(shards, tmp_path, capsys):
    folder = _copy_shards(shards, tmp_path / "in")
    for ext in (".bin", ".idx", ".tokenizer.json"):  # as --json-keys text title writes them
        shutil.copy(folder / f"00000_text_document{ext}", folder / f"00000_title_document{ext}")
    assert merge_main(["--input", str(folder), "--output-prefix", str(tmp_path / "m"), "--no-progress"]) == 2
    assert "several JSON keys (text, title); merge one at a time with --json-key KEY" in capsys.readouterr().err
    assert merge_main(["--input", str(folder), "--output-prefix", str(tmp_path / "m"), "--json-key", "text",
                       "--no-progress"]) == 0
    assert (tmp_path / "m.bin").read_bytes() == (shards / "one_text_document.bin").read_bytes()
