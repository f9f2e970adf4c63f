"""Checkpoints across the local/Transformer Engine line, RNG states across device types, and the optimizer
implementation a checkpoint records. TE itself cannot run here, so a TE model is stood in for by a module
with ``_extra_state`` entries (what TE's layers add to the sharded state dict)."""

from __future__ import annotations

import io
import logging

import pytest
import torch

from megatron_crossbert.platform import distributed as platform
from megatron_crossbert.checkpoint import load as load_module
from megatron_crossbert.checkpoint.errors import CheckpointError
from megatron_crossbert.checkpoint.load import load_model_weights, note_optimizer_impl, restore_rng
from megatron_crossbert.checkpoint import optimizer_format
from megatron_crossbert.checkpoint.optimizer_format import (
    OPTIMIZER_IMPL_KEY, SavedOptimizer, read_saved_optimizer, save_content_metadata,
)
from megatron_crossbert.checkpoint.save import save_model_only
from megatron_crossbert.checkpoint.state import get_rng_state, rng_device
from megatron_crossbert.checkpoint.verify import VerifiedCheckpoint
from tests.support.models import build, tiny_config


class FakeTEState(torch.nn.Module):
    """What a TE layer adds: an ``_extra_state`` entry (its FP8 scaling state), no weights."""

    def __init__(self) -> None:
        super().__init__()
        self.received = "nothing"

    def get_extra_state(self):
        return io.BytesIO(b"fp8 scales")

    def set_extra_state(self, state) -> None:
        self.received = state


def _model(seed: int, te: bool):
    model = build(tiny_config(), seed=seed)
    if te:
        for layer in model.encoder.layers:
            layer.mlp.linear_fc1.te_state = FakeTEState()
    return model


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}


@pytest.fixture
def world():
    yield
    platform.destroy()


@pytest.mark.parametrize("saved_te,loaded_te", [(False, True), (True, False)])
def test_a_checkpoint_loads_across_local_and_te_layers(tmp_path, world, saved_te, loaded_te, caplog):
    source = _model(1, saved_te)
    save_model_only(source, tiny_config(), tmp_path / "ckpt")
    target = _model(2, loaded_te)
    with caplog.at_level(logging.INFO, logger=load_module.__name__):
        load_model_weights(target, tmp_path / "ckpt")
    expected = _weights(source)
    assert all(torch.equal(value, expected[key]) for key, value in _weights(target).items())
    if loaded_te:  # the TE model's own entries start afresh, and the log says why
        assert all(layer.mlp.linear_fc1.te_state.received == "nothing" for layer in target.encoder.layers)
        assert "no Transformer Engine _extra_state for 1 modules" in caplog.text  # one key: layers stack


def test_a_checkpoint_lacking_a_weight_is_still_refused_in_one_line(tmp_path, world):
    save_model_only(_model(1, False), tiny_config(), tmp_path / "ckpt")
    target = _model(2, False)
    for layer in target.encoder.layers:
        layer.mlp.extra_weight = torch.nn.Linear(2, 2)  # a weight, not TE state
    with pytest.raises(CheckpointError, match="lacks 2 entries this model needs") as err:
        load_model_weights(target, tmp_path / "ckpt")
    assert "\n" not in str(err.value)


def test_rng_states_from_another_device_type_are_reseeded_with_a_log_line(world, caplog):
    build(tiny_config(), seed=1)
    state = get_rng_state()
    assert state["device"] == rng_device() == "cpu"
    torch.manual_seed(99)
    assert restore_rng(state, reseed=7) and torch.equal(torch.get_rng_state(), state["torch"])
    foreign = {**state, "device": "cuda"}
    with caplog.at_level(logging.WARNING, logger=load_module.__name__):
        assert not restore_rng(foreign, reseed=7)
    assert "saved on cuda and this run is on cpu; re-seeded from training.seed + iteration = 7" in caplog.text
    reseeded = torch.get_rng_state()
    torch.manual_seed(7)
    assert torch.equal(reseeded, torch.get_rng_state())  # seeded from 7, not the saved stream
    older_gpu_state = {key: value for key, value in state.items() if key != "device"} | {"cuda": state["torch"]}
    assert not restore_rng(older_gpu_state, reseed=7)  # no 'device' entry: a GPU's state is told by its 'cuda'


def test_the_checkpoint_records_the_adam_implementation_and_a_change_is_logged(tmp_path, monkeypatch, caplog):
    impl = save_content_metadata(tiny_config())[OPTIMIZER_IMPL_KEY]
    assert impl == "torch.optim.adamw.AdamW"  # no TE or apex here; TE's FusedAdam on a TE machine
    fused = "transformer_engine.pytorch.optimizers.fused_adam.FusedAdam"
    monkeypatch.setattr(optimizer_format, "saved_content", lambda ckpt_dir: {OPTIMIZER_IMPL_KEY: fused})
    saved = read_saved_optimizer(tmp_path, tiny_config())
    assert saved == SavedOptimizer(None, fused)  # read once, with the layout (none: no distributed optimizer)
    source = VerifiedCheckpoint(tmp_path, tiny_config(), None, False, str(tmp_path), optimizer_impl=saved.impl)
    with caplog.at_level(logging.WARNING, logger=load_module.__name__):
        assert note_optimizer_impl(source) == fused
    assert "written by transformer_engine.pytorch.optimizers.fused_adam.FusedAdam; this run continues it with " \
           "torch.optim.adamw.AdamW" in caplog.text
