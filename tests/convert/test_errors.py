"""Error paths of export/import and the CLI: each fails fast with a ConversionError naming the problem."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from megatron_crossbert.cli.convert_hf import main as cli_main
from megatron_crossbert.convert import ConversionError, export_to_hf, import_from_hf
from tests.support.conversion import make_checkpoint, make_tokenizer, tiny_run_config


@pytest.fixture(scope="module")
def setup(tmp_path_factory, word_tokenizer):
    """(work dir, checkpoint root, tokenizer dir, exported HF dir)."""
    work, tok = tmp_path_factory.mktemp("convert_errors"), word_tokenizer
    make_checkpoint(work / "ckpt", tiny_run_config("crossbert", tokenizer=str(tok)))
    assert cli_main(["export", str(work / "ckpt"), str(work / "hf")]) == 0
    return work, work / "ckpt", tok, work / "hf"


def _edited_checkpoint(src: Path, dst: Path, edit) -> Path:
    """A copy whose run_config.json is edited, as if saved that way (its checksums rewritten to match)."""
    from megatron_crossbert.checkpoint.checksums import write_record

    shutil.copytree(src, dst)
    cfg_path = dst / "iter_0000000" / "run_config.json"
    raw = json.loads(cfg_path.read_text())
    edit(raw)
    cfg_path.write_text(json.dumps(raw))
    write_record(cfg_path.parent, {}, {})
    return dst


def test_missing_and_corrupt_checkpoints(setup, tmp_path):
    work, ckpt, _, _ = setup
    with pytest.raises(ConversionError, match="does not exist"):
        export_to_hf(work / "nope", tmp_path / "a")
    broken = shutil.copytree(ckpt, tmp_path / "broken")
    for shard in (broken / "iter_0000000").glob("*.distcp"):
        shard.write_bytes(b"\0" * 64)
    with pytest.raises(ConversionError, match=r"__0_0\.distcp: 64 bytes, but \d+ were saved"):
        export_to_hf(broken, tmp_path / "b")
    with pytest.raises(ConversionError, match="cannot load model weights"):  # behind the checksums, too
        export_to_hf(broken, tmp_path / "b", verify="off")
    (broken / "latest").write_text("iter_0000042")
    with pytest.raises(ConversionError, match="missing or incomplete"):
        export_to_hf(broken, tmp_path / "c")
    assert not (tmp_path / "b").exists() and not list(tmp_path.glob(".b.tmp-*"))  # nothing half-written


def test_configs_without_exact_hf_target(setup, tmp_path):
    _, ckpt, _, _ = setup
    # A decoder of any width exports (it is dropped; convert/test_classic.py); a run config that misstates the
    # checkpoint's decoder width fails at the load, naming the tensor.
    wide = _edited_checkpoint(ckpt, tmp_path / "wide", lambda r: r["model"].update(decoder_hidden_size=64))
    with pytest.raises(ConversionError, match="cannot load model weights.*mask_embedding"):
        export_to_hf(wide, tmp_path / "a")
    rms = _edited_checkpoint(ckpt, tmp_path / "rms", lambda r: r["model"].update(normalization="RMSNorm"))
    with pytest.raises(ConversionError, match="normalization"):
        export_to_hf(rms, tmp_path / "b")


def test_tokenizer_must_fit_and_exist(setup, tmp_path):
    _, ckpt, _, _ = setup
    big = make_tokenizer(tmp_path / "big", num_words=600)
    with pytest.raises(ConversionError, match="605 tokens"):
        export_to_hf(ckpt, tmp_path / "a", tokenizer_dir=big)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConversionError, match="no Hugging Face tokenizer files"):
        export_to_hf(ckpt, tmp_path / "b", tokenizer_dir=tmp_path / "empty")
    no_tok = _edited_checkpoint(ckpt, tmp_path / "notok", lambda r: r["data"].update(tokenizer=""))
    with pytest.raises(ConversionError, match="--tokenizer"):
        export_to_hf(no_tok, tmp_path / "c")


def test_existing_output_needs_force(setup, tmp_path):
    work, ckpt, _, hf = setup
    with pytest.raises(ConversionError, match="--force"):
        export_to_hf(ckpt, hf)
    with pytest.raises(ConversionError, match="would overwrite the input"):
        export_to_hf(ckpt, ckpt, force=True)
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.bin").write_bytes(b"old")
    export_to_hf(ckpt, out, force=True)
    assert not (out / "stale.bin").exists() and (out / "model.safetensors").is_file()
    moved = list(tmp_path.glob("out.replaced-*"))   # --force moves the old output aside, it deletes nothing
    assert len(moved) == 1 and (moved[0] / "stale.bin").read_bytes() == b"old"
    with pytest.raises(ConversionError, match="--force"):
        import_from_hf(hf, work / "ckpt")


def test_import_refuses_pickle_and_inexact_configs(setup, tmp_path):
    _, _, _, hf = setup
    pickled = shutil.copytree(hf, tmp_path / "pickled")
    (pickled / "model.safetensors").unlink()
    (pickled / "pytorch_model.bin").write_bytes(b"not a pickle: must never be loaded")
    with pytest.raises(ConversionError, match="pickle weights"):
        import_from_hf(pickled, tmp_path / "a")
    relu = shutil.copytree(hf, tmp_path / "relu")
    cfg = json.loads((relu / "config.json").read_text())
    (relu / "config.json").write_text(json.dumps({**cfg, "hidden_act": "relu"}))
    with pytest.raises(ConversionError, match="hidden_act"):
        import_from_hf(relu, tmp_path / "b")


@pytest.mark.slow
def test_cli_reports_errors_and_module_help(setup, tmp_path, capsys):
    work, _, _, hf = setup
    assert cli_main(["export", str(work / "nope"), str(tmp_path / "x")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli_main(["import", str(hf), str(tmp_path / "root")]) == 0
    assert (tmp_path / "root" / "latest").read_text().strip() == "iter_0000000"
    done = subprocess.run([sys.executable, "-m", "megatron_crossbert.cli.convert_hf", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "export" in done.stdout and "import" in done.stdout


def test_parallel_state_handling(setup, tmp_path, monkeypatch):
    """A caller's world-1 process group survives an export; a caller at TP > 1 is refused."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    from megatron_crossbert.convert.native import tp1_parallel_state
    from megatron_crossbert.platform.distributed import init_process_group

    _, ckpt, _, _ = setup
    init_process_group()
    export_to_hf(ckpt, tmp_path / "hf")
    assert dist.is_initialized() and not parallel_state.model_parallel_is_initialized()
    with tp1_parallel_state(0):
        assert parallel_state.get_tensor_model_parallel_world_size() == 1
        monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_world_size", lambda: 2)
        with pytest.raises(ConversionError, match="TP=1/PP=1"):
            export_to_hf(ckpt, tmp_path / "refused")


def test_format_selection(setup, tmp_path):
    """``--format`` picks the target; unknown names and foreign model types fail with the choices."""
    work, ckpt, _, hf = setup
    assert json.loads((hf / "config.json").read_text())["architectures"] == ["XLMRobertaXLModel"]
    assert cli_main(["export", str(ckpt), str(tmp_path / "mb"), "--format", "megatron-bert"]) == 0
    assert json.loads((tmp_path / "mb" / "config.json").read_text())["architectures"] == ["MegatronBertModel"]
    with pytest.raises(ConversionError, match=r"unknown HF export format 'bert'.*xlmr-xl"):
        export_to_hf(ckpt, tmp_path / "a", format_name="bert")
    with pytest.raises(SystemExit):
        cli_main(["export", str(ckpt), str(tmp_path / "b"), "--format", "bert"])
    foreign = shutil.copytree(hf, tmp_path / "foreign")
    cfg = json.loads((foreign / "config.json").read_text())
    (foreign / "config.json").write_text(json.dumps({**cfg, "model_type": "bert"}))
    with pytest.raises(ConversionError, match="model_type='bert' is not importable"):
        import_from_hf(foreign, tmp_path / "c")
