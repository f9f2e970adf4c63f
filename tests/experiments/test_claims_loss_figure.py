"""The held-out loss figure: an arm's curve is every step any seed evaluated, over the seeds that reached it, and the
untrained floor is the reference arm's alone (a partly trained arm never lowers it)."""

from __future__ import annotations

import pytest

from experiments.claims import plots


def test_a_seed_still_training_neither_hides_nor_truncates_the_arms_curve():
    steps, bands = plots._loss_band({1: {610: 6.0, 1220: 5.5, 2440: 5.2}, 2: {610: 6.2}})
    assert steps == [610, 1220, 2440]
    assert bands[0].mean == pytest.approx(6.1) and bands[0].low < 6.0  # two seeds: a band
    assert [band.mean for band in bands[1:]] == [5.5, 5.2]  # one seed: its value


def test_the_untrained_floor_is_the_reference_arms_loss_alone(tmp_path, monkeypatch):
    drawn = {}
    real = plots._pyplot

    def spying_pyplot():
        plt = real()
        original = plt.subplots

        def subplots(*args, **kwargs):
            fig, ax = original(*args, **kwargs)
            monkeypatch.setattr(ax, "axhline", lambda y, **kw: drawn.setdefault(kw["label"].split(" ")[0], y))
            return fig, ax
        monkeypatch.setattr(plt, "subplots", subplots)
        return plt

    monkeypatch.setattr(plots, "_pyplot", spying_pyplot)
    losses = {"init-reference": {1: {1: 8.2}, 2: {1: 8.3}}, "bert": {1: {610: 6.0, 1220: 5.5}},
              "crossbert-compl": {1: {610: 6.4}}}  # one evaluation so far: still a curve, not a floor
    out = plots.plot_loss_curves(losses, 4096, 6.6, tmp_path / "loss.png", reference="init-reference")
    assert out.is_file() and drawn == {"untrained": pytest.approx(8.25), "unigram": 6.6}
    assert plots.plot_loss_curves({"init-reference": losses["init-reference"]}, 4096, 6.6, tmp_path / "none.png",
                                  reference="init-reference") is None
