"""The claims study's sections of ``docs/results.md``: the claims, and the throughput section it renders.

Both are published as sections (``results_page.publish``): blocks whose tables keep their numbers, stored as
``docs/results/<name>.json``, then rendered into the page in place.

Every number on the page is read from files the benchmarks wrote (throughput JSON, probe JSONs,
the command log); nothing is typed in by hand. Stages that did not complete are named as such,
and the verdict sentences are generated from the numbers, including where CrossBERT loses.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from megatron_crossbert.arch import get_arch
from megatron_crossbert.benchmarking.report import throughput_blocks
from megatron_crossbert.results_page import Bullets, Code, Heading, Paragraph, Section, publish
from .study.plan import Plan, RunSpec

from .analysis import StudyCurves


def _targets(results: list[dict]) -> Bullets:
    """The two throughput targets (docs/performance.md, "Throughput against the strongest BERT"), checked against the ratios to the sparse BERT baseline (the
    strongest BERT of the same size), with the dense-head figures beside them so any shrinkage shows."""
    by_name = {r["name"]: r for r in results}
    lines = []
    single, compl = by_name.get("crossbert r=0.5 single"), by_name.get("crossbert r=0.5 compl")
    if single:
        ratio = single["samples_per_s_vs_ref"]
        lines.append(f"Single view r=0.5: **{ratio:.3f}x** sparse-BERT samples/s{_spread(single)} (target >= 1.5x, "
                     f"aim 2x): {'met' if ratio >= 1.5 else 'NOT met'}{_against_dense(single)}.")
    if compl:
        ratio = compl["supervised_tokens_per_s_vs_ref"]
        lines.append(f"Complementary r=0.5: **{ratio:.3f}x** sparse-BERT supervised tokens/s (target >= 5x): "
                     f"{'met' if ratio >= 5 else 'NOT met'}; {compl['samples_per_s_vs_ref']:.2f}x its samples/s"
                     f"{_spread(compl)}.")
    dense = by_name.get("bert dense")
    if dense:
        lines.append(f"The dense-head BERT runs at {dense['samples_per_s_vs_ref']:.2f}x the sparse one's samples/s "
                     f"(FLOPs predict {dense['predicted_samples_per_s_vs_ref']:.2f}x): ratios against it overstate "
                     f"CrossBERT's advantage by {1 / dense['samples_per_s_vs_ref']:.2f}x.")
    for r in results:  # the CrossBERT rows compared with BERT (the other family has its own reference)
        if get_arch(r["arch"]).uses_views and r.get("reference") == "bert" and r.get("predicted_samples_per_s_vs_ref"):
            lines.append(f"{r['name']}: samples/s {r['samples_per_s_vs_ref']:.2f}x sparse BERT measured, "
                         f"{r['predicted_samples_per_s_vs_ref']:.2f}x predicted by model FLOPs.")
    return Bullets(lines)


def _spread(row: dict) -> str:
    """' (rounds 1.27-1.39)': the range of the per-round ratios the median comes from."""
    rounds = row.get("samples_per_s_vs_ref_per_round")
    return f" (rounds {min(rounds):.2f}-{max(rounds):.2f})" if rounds else ""


def _against_dense(row: dict) -> str:
    """' (x dense BERT: 1.60x)' where the dense-head baseline ran."""
    return f" ({row['samples_per_s_vs_dense']:.2f}x the dense-head BERT)" if row.get("samples_per_s_vs_dense") else ""


def _bert_family(cases: list) -> list:
    """The benchmark cases of BERT's encoder family (each family has its own MLM references)."""
    families: dict[str, list] = {}
    for case in cases:
        families.setdefault(case.encoder, []).append(case)
    return families[next(case.encoder for case in cases if case.name == "bert")]


def _flop_predictions() -> str:
    """What the model-FLOP ratio predicts at the real BERT-base/large shapes (no run needed)."""
    from megatron_crossbert.benchmarking.cases import default_cases
    from megatron_crossbert.models.flops import model_flops_per_sample

    lines = []
    for size in ("base", "large"):
        cases = _bert_family(default_cases(size))
        sparse = model_flops_per_sample(next(c for c in cases if c.is_reference).run_cfg)
        dense = model_flops_per_sample(next(c for c in cases if c.is_mlm and not c.is_reference).run_cfg)
        ratios = ", ".join(f"{c.name} {sparse / model_flops_per_sample(c.run_cfg):.2f}x "
                           f"({dense / model_flops_per_sample(c.run_cfg):.2f}x vs dense)"
                           for c in cases if not c.is_mlm)
        lines.append(f"- BERT-{size} shape (L=512, 2 decoder layers unless noted): samples/s ratio to sparse BERT "
                     f"predicted by FLOPs: {ratios}.")
    return ("Step time tracks model FLOPs closely on this CPU (lines above). If it tracked them as closely on "
            "a GPU (memory-bound ops and attention kernels usually make it track less well), the ratios at the "
            "real shapes would be as below; only `crossbert-bench gpu-check` on the H200 can measure them:\n" + "\n".join(lines))


def _throughput_blocks(throughput_jsons: list[Path]) -> list:
    if not throughput_jsons:
        return [Paragraph("**Not run yet** (no `benchmarks/out/throughput.json`).")]
    blocks = []
    for path in throughput_jsons:
        report = json.loads(path.read_text())
        blocks += [Paragraph(f"Command: `crossbert-bench throughput` (options `{json.dumps(report['meta']['options'])}`), "
                             f"started {report['meta']['started_utc']}."), *throughput_blocks(report),
                   _targets(report["results"])]
    blocks.append(Paragraph(_flop_predictions()))
    profiles = [json.loads(path.read_text()).get("profile") for path in throughput_jsons]
    if profiles[0]:
        from megatron_crossbert.benchmarking.profile import profile_table

        blocks += [Paragraph("Where one step's time goes at the first shape (ms and share of the step; see "
                             "`benchmarking/profile.py`):"), profile_table(profiles[0])]
    return blocks


THROUGHPUT_MARK = "throughput"
"""The results page's section that the throughput JSONs fill (rewritten only when they are given)."""
CLAIMS_MARK = "claims"
"""The results page's section of the claims study itself (``claims-<plan>`` for a plan other than cpu, so
every plan's section stands beside the others)."""


def claims_mark(plan: Plan) -> str:
    return CLAIMS_MARK if plan.name == "cpu" else f"{CLAIMS_MARK}-{plan.name}"


def write_results_page(path: Path, *, plan: Plan, runs: list[RunSpec], work_dir: Path, curves: StudyCurves,
                       figures: dict[str, Path | None], status: dict, throughput_jsons: list[Path],
                       caveats: list[str], records: Path | None = None) -> Path:
    """Publish this study's sections of the results page: the claims from ``work_dir`` and, when
    ``throughput_jsons`` are given, the throughput section. Every other section of the page (another tool's,
    another plan's, or text by hand) is left byte for byte (``results_page.publish``)."""
    from .claims_section import claims_section, shown_path

    written = time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())
    kept = f" --records {shown_path(records, path.parent)}" if records else ""
    command = f"python -m experiments.claims --plan {plan.name}{kept}"
    generated = (f"Generated by the claims study (`python -m experiments.claims`, plan `{plan.name}`) at {written} "
                 "from the files the runs wrote. Everything in this section was measured on a CPU-only machine with "
                 "2 cores: tiny encoders, one CPU thread a run. No GPU has run this study.")
    reproduce = Code(f"{command} --threads 1   # resumable; rerun to continue\n"
                     "crossbert-bench throughput --threads 1 --profile      # -> benchmarks/out/throughput.json")
    title, claims = claims_section(plan, runs, work_dir, curves, figures, path.parent, status, records)
    if throughput_jsons:
        shown = ", ".join(str(shown_path(p, path.parent)) for p in throughput_jsons)
        publish(path, Section(THROUGHPUT_MARK, Heading("Training-step throughput"),
                              f"written by {command} (its report, from {shown})", written,
                              _throughput_blocks(throughput_jsons)))
    blocks = [Paragraph(generated), Paragraph("Reproduce (from the repository root, venv active):"), reproduce,
              *claims, Heading("Caveats", 3), Bullets(caveats)]
    return publish(path, Section(claims_mark(plan), title, f"written by {command}", written, blocks))
