"""Write ``docs/results.md``: what was run, what was measured, and what did not finish.

Every number on the page is read from files the benchmarks wrote (throughput JSON, probe JSONs,
the command log); nothing is typed in by hand. Stages that did not complete are named as such,
and the verdict sentences are generated from the numbers, including where CrossBERT loses.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from megatron_crossbert.arch import get_arch
from megatron_crossbert.benchmarking.report import fmt, markdown_table, throughput_markdown
from megatron_crossbert.benchmarking.study.commands import read_command_log
from megatron_crossbert.benchmarking.study.plan import Plan, RunSpec, compute_budget_flops, flops_per_sample

from . import analysis as an


def _targets_text(results: list[dict]) -> str:
    """The issue's two throughput targets, checked against the ratios to the sparse BERT baseline (the
    strongest BERT of the same size), with the dense-head figures beside them so any shrinkage shows."""
    by_name = {r["name"]: r for r in results}
    lines = []
    single, compl = by_name.get("crossbert r=0.5 single"), by_name.get("crossbert r=0.5 compl")
    if single:
        ratio = single["samples_per_s_vs_ref"]
        lines.append(f"- Single view r=0.5: **{ratio:.3f}x** sparse-BERT samples/s{_spread(single)} (target >= 1.5x, "
                     f"aim 2x): {'met' if ratio >= 1.5 else 'NOT met'}{_against_dense(single)}.")
    if compl:
        ratio = compl["supervised_tokens_per_s_vs_ref"]
        lines.append(f"- Complementary r=0.5: **{ratio:.3f}x** sparse-BERT supervised tokens/s (target >= 5x): "
                     f"{'met' if ratio >= 5 else 'NOT met'}; {compl['samples_per_s_vs_ref']:.2f}x its samples/s"
                     f"{_spread(compl)}.")
    dense = by_name.get("bert dense")
    if dense:
        lines.append(f"- The dense-head BERT runs at {dense['samples_per_s_vs_ref']:.2f}x the sparse one's samples/s "
                     f"(FLOPs predict {dense['predicted_samples_per_s_vs_ref']:.2f}x): ratios against it overstate "
                     f"CrossBERT's advantage by {1 / dense['samples_per_s_vs_ref']:.2f}x.")
    for r in results:  # the CrossBERT rows compared with BERT (the other family has its own reference)
        if get_arch(r["arch"]).uses_views and r.get("reference") == "bert" and r.get("predicted_samples_per_s_vs_ref"):
            lines.append(f"- {r['name']}: samples/s {r['samples_per_s_vs_ref']:.2f}x sparse BERT measured, "
                         f"{r['predicted_samples_per_s_vs_ref']:.2f}x predicted by model FLOPs.")
    return "\n".join(lines)


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


def _throughput_section(throughput_jsons: list[Path]) -> str:
    if not throughput_jsons:
        return "## 1. Training-step throughput\n\n**Not run yet** (no `benchmarks/out/throughput.json`)."
    parts = ["## 1. Training-step throughput"]
    for path in throughput_jsons:
        report = json.loads(path.read_text())
        parts += [f"Command: `crossbert-bench throughput` (options `{json.dumps(report['meta']['options'])}`), "
                  f"started {report['meta']['started_utc']}.", throughput_markdown(report),
                  _targets_text(report["results"])]
    parts.append(_flop_predictions())
    profiles = [json.loads(path.read_text()).get("profile") for path in throughput_jsons]
    if profiles[0]:
        from megatron_crossbert.benchmarking.profile import profile_markdown

        parts += ["Where one step's time goes at the first shape (ms and share of the step; see "
                  "`benchmarking/profile.py`):", profile_markdown(profiles[0])]
    return "\n\n".join(parts)


def _plan_section(plan: Plan, runs: list[RunSpec], work_dir: Path) -> str:
    subset = work_dir / "corpus_subset.json"
    corpus = json.loads(subset.read_text()) if subset.is_file() else None
    lines = [f"- Plan `{plan.name}`: L={plan.seq_length}, global batch {plan.global_batch} "
             f"(micro-batch {plan.micro_batch}), AdamW lr {plan.lr} constant after {plan.warmup} warm-up steps, "
             f"fp32, 1 process on the CPU, dropout 0.1.",
             f"- Corpus: {fmt(corpus['bytes'] / 1e6, 1) if corpus else '?'} MB subset of `../shared/data/corpus`, "
             f"round-robin over all sources; tokenizer: unigram, vocab {plan.vocab_size}, trained on that subset.",
             f"- Probes: frozen encoder, mean-pooled last layer, logistic regression (ridge for STS-B) with CV; "
             f"GLUE {', '.join(plan.glue_tasks)} and {', '.join(plan.jsonl_tasks)}; each task subsampled to "
             f"{plan.probe_max_train} train / {plan.probe_max_test} test rows (seed 0), max {plan.probe_max_len} tokens.",
             f"- MTEB-lite avg (when scored): mteb's main score over STS12-16 and Banking77 through "
             f"`crossbert-mteb`'s code path, test sets subsampled to {fmt(plan.mteb_lite_max_test, 0)} rows (seed 0; "
             f"— = all rows).",
             f"- Compute budget = BERT's model FLOPs for {plan.sample_steps * plan.global_batch} samples = "
             f"{fmt(compute_budget_flops(plan) / 1e12, 2)} TFLOP."]
    rows = []
    for run in runs:
        per = flops_per_sample(plan, run.arch, run.mask_ratio, run.complementary, run.shape)
        rows.append([run.name, run.arch, "—" if not get_arch(run.arch).uses_views else f"r={run.mask_ratio}, "
                     f"{'2 views' if run.complementary else '1 view'}", run.shape.label, run.train_steps,
                     run.train_steps * plan.global_batch, fmt(per / 1e9, 3), run.group])
    table = markdown_table(["run", "arch", "masking", "encoder", "steps", "samples", "GFLOP/sample", "group"], rows)
    return "\n".join(lines) + "\n\n" + table


def _commands_section(work_dir: Path) -> str:
    log = read_command_log(work_dir)
    if not log:
        return "No commands recorded yet."
    lines = [f"{e['finished_utc']}  {e['seconds']:>7.1f}s  exit {e['exit_code']}  "
             + " ".join(Path(a).name if i == 0 else a for i, a in enumerate(e["argv"])) for e in log]
    return "```\n" + "\n".join(lines) + "\n```"


def _operator_notes(work_dir: Path) -> str:
    """``NOTES.md`` in the work dir, verbatim: how the stages were driven (invocations, restarts)."""
    path = work_dir / "NOTES.md"
    return "How the experiment was driven (operator notes, `NOTES.md`):\n\n" + path.read_text().strip() if path.is_file() else ""


def _points_table(points: dict[str, an.Point | None], task_names: list[str]) -> str:
    headers = ["model", "step", "samples", "TFLOP"] + task_names + ["GLUE avg", "all avg", "MTEB-lite avg"]
    rows = []
    for name, p in points.items():
        if p is None:
            rows.append([name, "not available"] + [""] * (len(headers) - 2))
            continue
        rows.append([name, p.iteration, p.samples, fmt(p.flops / 1e12, 2)]
                    + [fmt(p.tasks.get(t), 1) for t in task_names]
                    + [fmt(p.glue_average, 1), fmt(p.average, 1), fmt(p.mteb_lite_average, 1)])
    return markdown_table(headers, rows)


def _verdict(points: dict[str, an.Point | None], label: str) -> str:
    bert = points.get("bert")
    if bert is None or bert.average is None:
        return f"No {label} verdict: BERT's point is missing."
    out = []
    for name, p in points.items():
        if name == "bert" or p is None or p.average is None:
            continue
        word = "beats" if p.average > bert.average else "does NOT beat"
        out.append(f"{name} {word} BERT at {label} ({p.average:.1f} vs {bert.average:.1f} mean probe score).")
    return " ".join(out)


def _reading_text(points: dict[str, an.Point | None], reference: an.Point | None) -> str:
    """Whether pretraining beat the untrained floor at all; if not, the comparisons test nothing."""
    trained = {n: p.average for n, p in points.items() if p is not None and p.average is not None
               and not n.startswith("init")}
    if reference is None or reference.average is None or not trained:
        return ""
    best = max(trained, key=trained.get)
    if reference.average >= trained[best]:
        return (f"**Reading.** The untrained encoder scores {reference.average:.1f}, at least as high as every "
                f"trained model at this budget (best: {best}, {trained[best]:.1f}). At this scale pretraining has "
                f"not yet produced features a frozen linear probe uses better than the random initial "
                f"embeddings, so these numbers do not test the paper's claims in either direction; they show "
                f"the pipeline end to end and the size of the noise.")
    beaten = [n for n, v in trained.items() if v > reference.average]
    return (f"**Reading.** Above the untrained floor ({reference.average:.1f}): {', '.join(beaten)}; "
            f"only gaps larger than the noise spread below are evidence.")


def _noise_text(curves: dict[str, list[an.Point]]) -> str:
    """How much each run's score moves between its own checkpoints: a floor for meaningful gaps."""
    parts = []
    for name, points in curves.items():
        scores = [p.average for p in points if p.average is not None]
        if len(scores) >= 2:
            parts.append(f"{name} {min(scores):.1f}-{max(scores):.1f}")
    if not parts:
        return ""
    return ("Spread of each run's mean probe score across its own checkpoints (a rough noise floor: "
            "gaps smaller than this are not evidence either way): " + "; ".join(parts) + ".")


def _efficiency_text(curves: dict[str, list[an.Point]], plan: Plan) -> str:
    rows = []
    for name, item in an.sample_efficiency(curves, plan).items():
        needed = item["samples_needed"]
        rows.append([name, fmt(item["bert_score"], 1), item["bert_samples"],
                     "not reached" if needed is None else ("≤ " if item["at_first_point"] else "") + fmt(needed, 0),
                     "—" if item["factor"] is None else (fmt(item["factor"], 2, suffix="x") if item["stays_above"]
                                                         else "none (crossing not sustained)"),
                     "yes" if item["stays_above"] else "no"])
    if not rows:
        return "Samples-to-match not available (BERT's sample-budget checkpoint has no probe result yet)."
    return ("Samples a CrossBERT run needed to reach BERT's mean probe score at the sample budget "
            "(interpolated between checkpoints; factor = BERT samples / CrossBERT samples, paper claims 2x). "
            "A factor only means something if the run then stays at or above BERT's score at every later "
            "checkpoint (last column); a first crossing inside the noise spread is not evidence.\n\n"
            + markdown_table(["run", "BERT score", "BERT samples", "samples needed", "factor",
                              "stays >= BERT afterwards"], rows))


def _sweep_text(plan: Plan, runs: list[RunSpec], work_dir: Path, figure: Path | None, docs_dir: Path) -> str:
    rows = an.sweep_table(plan, runs, work_dir)
    table = markdown_table(["encoder", "run", "GFLOP/sample", "GLUE avg", "all avg", "MTEB-lite avg"], [
        [r["shape"].label, r["run"], fmt(r["flops_per_sample"] / 1e9, 3),
         fmt(r["point"].glue_average if r["point"] else None, 1),
         fmt(r["point"].average if r["point"] else None, 1),
         fmt(r["point"].mteb_lite_average if r["point"] else None, 1)] for r in rows])
    mono = an.is_monotonic(rows)
    verdict = {True: "Quality rises monotonically with size at this budget.",
               False: "Quality does NOT rise monotonically with size at this budget.",
               None: "Not all sweep sizes have results yet: no verdict."}[mono]
    image = f"\n\n![size sweep]({os.path.relpath(figure, docs_dir)})" if figure else ""
    return (f"CrossBERT r=0.5 complementary at three encoder sizes, each after {plan.sweep_steps} steps "
            f"({plan.sweep_steps * plan.global_batch} samples).\n\n{table}\n\n{verdict}{image}")


def _sample_efficiency_section(plan: Plan, runs: list[RunSpec], work_dir: Path, figures: dict[str, Path | None],
                               docs_dir: Path, status: dict) -> str:
    main = [r for r in runs if r.group == "main"]
    curves = {r.name: an.curve(plan, r, work_dir) for r in main}
    task_names = sorted({t for pts in curves.values() for p in pts for t in p.tasks})
    budget = compute_budget_flops(plan)
    reference = {"init (1 step, ~untrained)": an.reference_point(plan, runs, work_dir)}
    equal_samples = {**{r.name: an.at_iteration(curves[r.name], plan.sample_steps) for r in main}, **reference}
    equal_flops = {**{r.name: an.closest_flops(curves[r.name], budget) for r in main}, **reference}
    images = "\n\n".join(f"![{key}]({os.path.relpath(path, docs_dir)})" for key, path in figures.items()
                         if path and key != "sweep")
    return "\n\n".join([
        "## 2. Sample efficiency (small-scale replication)",
        "Stage status when this page was written:\n\n" + "\n".join(f"- `{k}`: {v}" for k, v in status.items()),
        "### What was run", _plan_section(plan, runs, work_dir),
        "Exact commands (from `commands.jsonl`; time is wall-clock on 2 shared cores):", _commands_section(work_dir),
        _operator_notes(work_dir),
        f"### Equal samples ({plan.sample_steps * plan.global_batch} sequences)",
        _points_table(equal_samples, task_names), _verdict(equal_samples, "equal samples"),
        _reading_text(equal_samples, reference["init (1 step, ~untrained)"]),
        f"### Equal compute (~{fmt(budget / 1e12, 2)} TFLOP, nearest checkpoint)",
        _points_table(equal_flops, task_names), _verdict(equal_flops, "equal compute"),
        _reading_text(equal_flops, reference["init (1 step, ~untrained)"]),
        _noise_text(curves), "### Sample efficiency", _efficiency_text(curves, plan), "### Curves", images or "No curves yet.",
        "### Model-size sweep", _sweep_text(plan, runs, work_dir, figures.get("sweep"), docs_dir)])


KEPT_SECTION = re.compile(r"<!-- ([a-z0-9-]+):start .*?-->.*?<!-- \1:end -->", re.S)


def kept_sections(path: Path) -> list[str]:
    """Sections other tools own (between ``<!-- NAME:start ... -->`` and ``<!-- NAME:end -->``: the GPU
    validation, the offline MTEB table), carried over verbatim when this page is rewritten."""
    return [m.group(0) for m in KEPT_SECTION.finditer(path.read_text())] if path.is_file() else []


def write_results_page(path: Path, *, plan: Plan, runs: list[RunSpec], work_dir: Path,
                       figures: dict[str, Path | None], status: dict, throughput_jsons: list[Path],
                       caveats: list[str]) -> Path:
    """Render the whole page and write it atomically."""
    header = (f"# Results\n\nGenerated by the sample-efficiency experiment (`experiments/sample_efficiency`) at "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
              f"from the files the benchmarks wrote. Everything here is a **small-scale** measurement on a "
              f"CPU-only machine (2 cores shared with other jobs): it tests the direction of the paper's claims "
              f"on tiny models, not their size. The H200 check (`crossbert-bench gpu-check`) has not been run.")
    reproduce = ("Reproduce (from the repository root, venv active):\n\n```\n"
                 "crossbert-bench throughput --threads 1 --profile      # -> benchmarks/out/throughput.json\n"
                 "crossbert-bench throughput --threads 1 --seq-length 512 --steps 5 --out benchmarks/out/throughput_L512.json\n"
                 "python -m experiments.sample_efficiency                # resumable; rerun to continue\n"
                 "crossbert-bench gpu-check                              # on an H200 (<8 min)\n```")
    body = [header, reproduce, _throughput_section(throughput_jsons),
            _sample_efficiency_section(plan, runs, work_dir, figures, path.parent, status),
            "## Caveats\n\n" + "\n".join(f"- {c}" for c in caveats), *kept_sections(path)]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text("\n\n".join(body) + "\n")
    tmp.replace(path)
    return path
