"""The study's tools publish sections, not markdown: each writes its section's JSON beside the page (numbers as
numbers), and replaces only its own section of the page, which is then exactly that JSON's render."""

from __future__ import annotations

import json

from experiments.claims.ablations.page import write_ablations_section
from experiments.claims.sweep.page import write_sweep_section
from experiments.device_check.report import write_gpu_section
from megatron_crossbert.results_page.blocks import Heading, PageOrder, Paragraph
from megatron_crossbert.results_page.store import first_difference, json_dir, write_order

SWEEP = {"sweep": "tiny", "plan": "smoke", "seed": 1, "written_utc": "2026-12-07T02:14:55Z",
         "unigram": {"nats": 6.6434, "tokens": 19344602, "types": 4090, "ln_vocab": 8.318},
         "rows": [{"name": "untrained-bert", "arm": "bert", "untrained": True, "changes": {}, "tokens": 4096, "steps": 1,
                   "losses": {"1": 8.233}, "final_loss": 8.233, "done": True, "cpu_s": 12.0},
                  {"name": "bert-a", "arm": "bert", "untrained": False, "changes": {"lr": 0.002}, "tokens": 2998272,
                   "steps": 732, "losses": {"183": 6.3, "366": 6.12, "549": 5.91, "732": 5.77}, "final_loss": 5.77,
                   "done": True, "cpu_s": 498.0},
                  {"name": "bert-b", "arm": "bert", "untrained": False, "changes": {"lr": 0.004}, "tokens": 2998272,
                   "steps": 732, "losses": {}, "final_loss": None, "done": False}]}
ABLATIONS = {"plan": "smoke", "seed": 1, "written_utc": "now", "rows": [
    {"key": "c--r0", "group": "probe-time", "model": "crossbert-compl-s1", "what": "all tokens", "done": True,
     "glue_raw": 40.25, "glue_whitened": 60.0, "mteb_raw": 20.0, "effective_rank": 5.9, "dim": 32, "mean_cosine": 0.81,
     "valid_loss": 5.25, "cpu_s": 60.0},
    {"key": "dec1", "group": "decoder", "model": "crossbert-compl-s1", "what": "1 decoder layer", "done": False}]}
GPU = {"meta": {"device": "H200", "toy": False, "started_utc": "2026-12-08T00:00:00Z", "torch": "2", "python": "3",
                "command": "scripts/device_check.sh run", "transformer_engine": "TE", "stages": ["memory"]},
       "stages": {"memory": {"ok": True, "wall_s": 20.4, "budget_s": 100, "result": {"rows": [
           {"name": "bert", "step_bytes": 6 << 20, "measured_step_bytes": 5 << 20, "step_ratio": 1.2,
            "peak_bytes": 9 << 20, "measured_peak_bytes": None, "peak_ratio": None}]}}}}


def _page(tmp_path):
    page = tmp_path / "docs" / "results.md"
    write_order(page, PageOrder([Heading("Results", 1), Paragraph("Intro.")], []))
    return page


def test_the_sweep_section_is_its_json_with_the_losses_as_numbers(tmp_path):
    page = _page(tmp_path)
    write_sweep_section(page, SWEEP)
    table = json.loads((json_dir(page) / "recipe-sweep.json").read_text())["blocks"][2]
    assert table["rows"][1][2:] == [2998272, 732, [6.3, 6.12, 5.91], 5.77, 6.6434 - 5.77, 8.3]
    assert table["rows"][2][4:7] == [[], None, None]  # not trained yet: no losses, nothing below the floor
    text = page.read_text()
    assert "| **bert-a** | lr=0.002 | 2,998,272 | 732 | 6.30, 6.12, 5.91 | 5.770 | +0.87 | 8.3 |" in text
    assert "| bert-b | lr=0.004 | 2,998,272 | 732 |  | — | — | — |" in text
    assert first_difference(page) is None


def test_the_ablations_and_the_gpu_sections_are_their_json_and_keep_each_other(tmp_path):
    page = _page(tmp_path)
    write_ablations_section(page, ABLATIONS)
    write_gpu_section(page, [GPU])
    assert json.loads((json_dir(page) / "_page.json").read_text())["sections"] == ["collapse-ablations",
                                                                                  "gpu-validation"]
    ablations = json.loads((json_dir(page) / "collapse-ablations.json").read_text())["blocks"][1]["rows"]
    assert ablations[0][2:] == [40.25, 60.0, 20.0, "5.9 / 32", 0.81, 5.25, 1.0]
    memory = json.loads((json_dir(page) / "gpu-validation.json").read_text())["blocks"][-1]["rows"]
    assert memory == [["bert", 6 << 20, 5 << 20, 1.2, 9 << 20, None, None]]  # bytes, shown in MiB
    before = page.read_text()
    write_gpu_section(page, [GPU, GPU])
    after = page.read_text()
    assert after.startswith(before.split("<!-- gpu-validation:start")[0]) and "### Call 2" in after
    assert "| bert | 6.0 | 5.0 | 1.20 | 9.0 | — | — |" in after and first_difference(page) is None
