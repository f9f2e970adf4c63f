"""``files_identity`` may sample large files (``sample_above``), as ``tree_identity`` does: small files are read
whole either way, so the identity of a tokenizer's files does not depend on the choice."""

from __future__ import annotations

from megatron_crossbert.content_identity import BLOCK, BLOCKS, SAMPLE_ABOVE, files_identity


def _edit(path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_small_files_are_read_whole_with_or_without_sampling(tmp_path):
    files = [("a", tmp_path / "a.json"), ("b", tmp_path / "b.txt"), ("missing", tmp_path / "none")]
    files[0][1].write_text('{"pad_token": "[PAD]"}')
    files[1][1].write_bytes(bytes(range(256)) * 64)
    assert files_identity(files) == files_identity(files, sample_above=SAMPLE_ABOVE)
    before = files_identity(files, sample_above=0)
    _edit(files[1][1], 1000)
    assert files_identity(files, sample_above=0) != before


def test_a_large_file_is_sampled_above_the_threshold_only(tmp_path):
    big = tmp_path / "weights.bin"
    big.write_bytes(bytes(BLOCKS * BLOCK * 2))
    files = [("weights", big)]
    whole, sampled = files_identity(files), files_identity(files, sample_above=0)
    _edit(big, BLOCK + 10)  # between the first two sampled blocks
    assert files_identity(files, sample_above=0) == sampled and files_identity(files) != whole
    _edit(big, 0)  # inside the first sampled block
    assert files_identity(files, sample_above=0) != sampled
