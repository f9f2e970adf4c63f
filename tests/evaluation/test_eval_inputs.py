"""Evaluation inputs through the real CLIs: bad gold labels, texts longer than the model, a
model whose embeddings are all alike, BOM-started files, and ``--out`` naming a file. One ``cli_cases``
subprocess runs every case (one import, one fork per case); the readers and rules themselves are unit-tested
in ``test_gold_labels.py`` and ``test_eval_max_len.py``, the output paths in ``tests/test_outputs.py``.

Before: NaN and constant gold scores exited 0 printing ``nan`` and a NaN average (``mteb_summary.json`` held
the non-JSON token ``NaN``); a 64-position model crashed at the default 128/256 tokens; a BOM-started JSONL
task was refused; ``--out FILE`` failed with ``[Errno 17]`` after every task was encoded and scored.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.support.cli_cases import error_lines, run_cases
from tests.support.synthetic_eval import NEUTRAL, POSITIVE, write_jsonl_task

pytestmark = pytest.mark.e2e


def _cli(name: str, *argv) -> dict:
    return {"module": f"megatron_crossbert.cli.{name}", "argv": [str(a) for a in argv]}


def _write_sts(path: Path, pairs: list[tuple[str, str]], scores: list, bom: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [json.dumps({"sentence1": a, "sentence2": b, "score": s}) for (a, b), s in zip(pairs, scores)]
    path.write_text(("\ufeff" if bom else "") + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def _long_task(task: Path, rng: random.Random, words: list[str]) -> Path:
    """A probe task of 200-word texts (far over 64 tokens)."""
    task.mkdir()
    for split, n in (("train", 12), ("test", 8)):
        (task / f"{split}.jsonl").write_text("".join(
            json.dumps({"text": " ".join(rng.choices(words, k=200)), "label": i % 2}) + "\n" for i in range(n)))
    return task


def _inputs(tmp: Path) -> dict[str, Path]:
    """Task files: long texts (hundreds of tokens; in the native checkpoint's words for it, whose whitened probe
    refuses features without variance), NaN / constant STS gold, a null label, BOM-started files,
    and STS pairs whose words no tokenizer of the native checkpoint knows (every embedding alike)."""
    rng = random.Random(0)
    words = list(NEUTRAL + POSITIVE)
    pairs = [(" ".join(rng.choices(words, k=6)), " ".join(rng.choices(words, k=6))) for _ in range(20)]
    scores = [rng.uniform(0, 5) for _ in pairs]
    long_pairs = [(" ".join(rng.choices(words, k=200)), " ".join(rng.choices(words, k=200))) for _ in range(12)]
    unknown = [("zz qq yy xx", "vv uu tt ss")] * 10
    inputs = {
        "long": _long_task(tmp / "long", rng, words),
        "long_w": _long_task(tmp / "long_w", rng, [f"w{i}" for i in range(100)]),  # the native tokenizer's words
        "long_sts": _write_sts(tmp / "long_bench" / "STSlong" / "test.jsonl", long_pairs, scores[:12]).parent.parent,
        "nan": _write_sts(tmp / "nan_bench" / "STSnan" / "test.jsonl", pairs, scores[:7] + [float("nan")] + scores[8:]),
        "equal": _write_sts(tmp / "equal.jsonl", pairs, [3.0] * 20),
        "alike": _write_sts(tmp / "alike" / "STSalike" / "test.jsonl", unknown, list(range(10))).parent.parent,
        "bom_sts": _write_sts(tmp / "bom_bench" / "STSbom" / "test.jsonl", pairs, scores, bom=True).parent.parent,
        "bom_task": write_jsonl_task(tmp / "bom_task", n_train=12, n_test=8),
        "null": write_jsonl_task(tmp / "null_task", n_train=12, n_test=8),
    }
    _write_sts(tmp / "nan_bench" / "STSok" / "test.jsonl", pairs, scores)
    for split in ("train", "test"):
        path = inputs["bom_task"] / f"{split}.jsonl"
        path.write_text("\ufeff" + path.read_text(), encoding="utf-8")
    lines = (inputs["null"] / "test.jsonl").read_text().splitlines()
    lines[4] = json.dumps({"text": "a film", "label": None})
    (inputs["null"] / "test.jsonl").write_text("\n".join(lines) + "\n")
    return inputs


def _cases(tmp: Path, hf: Path, ckpt: Path, tok: Path) -> dict[str, dict]:
    data = _inputs(tmp)
    afile = tmp / "afile"
    afile.write_text("not a directory\n")
    native = ("--model", ckpt, "--tokenizer-dir", tok)
    out = iter(range(100))
    probe = lambda *a: _cli("probe", *a, "--cv-folds", 2, "--out", tmp / f"out{next(out)}")  # noqa: E731
    mteb = lambda *a: _cli("mteb", *a, "--out", tmp / f"out{next(out)}")  # noqa: E731
    return {
        "probe: 64 positions, long texts": probe("--model", hf, "--jsonl", data["long"]),
        "probe: --max-len above the model": probe("--model", hf, "--jsonl", data["long"], "--max-len", 100),
        "probe: native checkpoint, 32 positions": probe(*native, "--jsonl", data["long_w"]),
        "mteb: 64 positions, long texts": mteb("--model", hf, "--benchmark-dir", data["long_sts"]),
        "mteb: --max-len above the model": mteb("--model", hf, "--benchmark-dir", data["long_sts"], "--max-len", 100),
        "mteb: a NaN score": mteb("--model", hf, "--benchmark-dir", data["nan"].parent.parent),
        "mteb: constant scores": mteb("--model", hf, "--local-task", f"sts:eq:{data['equal']}"),
        "probe: a null label": probe("--model", hf, "--jsonl", data["null"]),
        "mteb: every embedding alike": mteb(*native, "--benchmark-dir", data["alike"]),
        "probe: BOM-started task": probe("--model", hf, "--jsonl", data["bom_task"]),
        "mteb: BOM-started task": mteb("--model", hf, "--benchmark-dir", data["bom_sts"]),
        "probe: --out FILE": _cli("probe", "--model", hf, "--jsonl", data["bom_task"], "--out", afile,
                                  "--cache-dir", tmp / "cache_out_file"),
        "mteb: --out FILE": _cli("mteb", "--model", hf, "--benchmark-dir", data["bom_sts"], "--out", afile,
                                 "--cache-dir", tmp / "cache_out_file"),
        "export to a FILE, --force": _cli("convert_hf", "export", ckpt, afile, "--tokenizer", tok, "--force"),
        "preprocess under a FILE": _cli("preprocess", "--input", data["null"] / "test.jsonl", "--tokenizer", tok,
                                        "--output-prefix", afile / "x", "--no-progress"),
        "train-tokenizer into a FILE": _cli("train_tokenizer", "--input", data["null"] / "test.jsonl",
                                            "--output-dir", afile, "--model", "wordpiece", "--vocab-size", 50),
    }


def _refusals(tmp: Path, hf: Path) -> dict[str, str]:
    """name -> the one error line's fragment."""
    afile = tmp / "afile"
    return {
        "probe: --max-len above the model": f"error: --max-len 100: the model takes at most 64 tokens per text "
                                            f"({hf / 'config.json'} (max_position_embeddings 64))",
        "mteb: --max-len above the model": "error: --max-len 100: the model takes at most 64 tokens per text",
        "mteb: a NaN score": f"error: {tmp / 'nan_bench' / 'STSnan' / 'test.jsonl'}:8: score nan is not a finite number",
        "mteb: constant scores": f"error: {tmp / 'equal.jsonl'}: every score is 3; a correlation with constant gold",
        "probe: a null label": f"error: {tmp / 'null_task' / 'test.jsonl'}:5: label is null (missing)",
        "probe: --out FILE": f"error: --out {afile}: is a file, not a directory",
        "mteb: --out FILE": f"error: --out {afile}: is a file, not a directory",
        "export to a FILE, --force": f"error: output directory {afile}: is a file, not a directory",
        "preprocess under a FILE": f"error: --output-prefix's directory {afile}: is a file, not a directory",
        "train-tokenizer into a FILE": f"error: --output-dir {afile}: is a file, not a directory",
    }


def _strict_json(path: Path) -> dict:
    def refuse(token: str):
        raise AssertionError(f"{path}: non-JSON token {token}")

    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.mark.slow
def test_evaluation_inputs_through_the_clis(tiny_hf_encoder, tiny_checkpoint, tmp_path):
    from tests.support.checkpoints import write_tokenizer

    tok = write_tokenizer(tmp_path / "tok")
    cases = _cases(tmp_path, tiny_hf_encoder, tiny_checkpoint, tok)
    results = dict(zip(cases, run_cases(list(cases.values()), tmp_path,
                                        env={"CROSSBERT_EVAL_CACHE": str(tmp_path / "cache")})))
    refusals = _refusals(tmp_path, tiny_hf_encoder)
    for name, fragment in refusals.items():
        result, errors = results[name], error_lines(results[name])
        assert result["rc"] == 2 and "Traceback" not in result["stderr"], (name, result["stderr"][-3000:])
        assert len(errors) == 1 and errors[0].startswith(fragment), (name, errors, fragment)
    for name in set(cases) - set(refusals) - {"mteb: every embedding alike"}:
        assert results[name]["rc"] == 0, (name, results[name]["stderr"][-3000:])
    assert "max length 64 tokens per text: the model's limit" in results["probe: 64 positions, long texts"]["stderr"]
    assert _strict_json(tmp_path / "out0" / "probe_results.json")["config"]["max_len"] == 64
    assert _strict_json(tmp_path / "out2" / "probe_results.json")["config"]["max_len"] == 32  # the export's table
    alike = results["mteb: every embedding alike"]
    assert alike["rc"] == 1 and "Traceback" not in alike["stderr"], alike["stderr"][-3000:]  # every task failed
    summary = _strict_json(tmp_path / "out8" / "mteb_summary.json")
    assert summary["tasks"] == [] and "have zero variance" in summary["errors"]["STSalike"]  # named at its cause
    table = (tmp_path / "out8" / "mteb_summary.md").read_text().lower()
    assert "| nan" not in table and "average" not in table  # a failed task, not a NaN row or a NaN average
    assert (tmp_path / "afile").read_text() == "not a directory\n"
    assert not (tmp_path / "cache_out_file").exists()  # refused before anything was encoded or cached
