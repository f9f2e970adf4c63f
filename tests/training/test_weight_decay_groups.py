"""Weight decay reaches the matrices only: megatron-core's default parameter groups, which ``build_optimizer`` keeps,
give every norm and bias (1-D parameters and ``*.bias``) no decay, for each architecture (a recipe suspect when a
small encoder does not learn). The scheduler sets each group's decay (the config's times the group's ``wd_mult``)."""

from __future__ import annotations

import pytest

from megatron_crossbert.training.optimizer import build_optimizer, build_scheduler, wrap_ddp
from tests.support.models import MLM_ARCHS, build, tiny_config

ARCH_OVERRIDES = {"crossbert": (), **MLM_ARCHS}


def _decay_by_name(arch: str) -> tuple[dict[str, float], dict[str, int]]:
    """{parameter name: the weight decay its optimizer group applies once the run's scheduler has set it} and
    {parameter name: its number of dimensions}, of one model."""
    cfg = tiny_config("training.weight_decay=0.1", *ARCH_OVERRIDES[arch])
    model = build(cfg)
    ddp = wrap_ddp(model, cfg)
    names = {id(param): name for name, param in model.named_parameters()}
    built = build_optimizer(ddp, cfg)
    build_scheduler(built, cfg).step(1)
    decay = {}
    for optimizer in getattr(built, "chained_optimizers", None) or [built]:
        for group in optimizer.param_groups:
            for param in group["params"]:
                decay[names[id(param)]] = group["weight_decay"]
    return decay, {name: param.dim() for name, param in model.named_parameters()}


@pytest.mark.parametrize("arch", sorted(ARCH_OVERRIDES))
def test_norms_and_biases_get_no_weight_decay_and_matrices_get_the_configured_one(arch):
    decay, shapes = _decay_by_name(arch)
    undecayed = {name for name, wd in decay.items() if wd == 0.0}
    assert undecayed == {name for name, dim in shapes.items() if dim == 1 or name.endswith(".bias")}
    assert {decay[name] for name in shapes if name not in undecayed} == {0.1}
    assert any("norm" in name for name in undecayed)  # the final norm and the layers' norms among them
