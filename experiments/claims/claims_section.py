"""The claims study's part of ``docs/results.md`` as blocks: tables with intervals, figures and one verdict per claim.

Every number is read from the study's files (probe JSONs, TensorBoard events, ``commands.jsonl``,
``status.json``); the verdict sentences are generated from the intervals (``stats.verdict``), so a claim
reads "supported" or "contradicted" only where the 95% interval of the paired difference excludes zero.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from megatron_crossbert.arch import get_arch
from megatron_crossbert.benchmarking.report import fmt
from megatron_crossbert.results_page import Bullets, Column, Figure, Heading, Paragraph, table
from .study.commands import read_command_log
from .study.plan import Plan, RunSpec, arm_of, compute_budget_flops, run_flops_per_sample
from .study.stats import NOT_RESOLVED, Interval, mean_interval, paired_difference, verdict
from .study.train_stage import finished_runs

from . import analysis as an
from .plan import CPU_KEY, seeds

REFERENCE = "untrained"
CHALLENGERS = ("crossbert-single", "crossbert-compl", "crossbert-fast")


def _text(interval: Interval | None, digits: int = 1) -> str:
    return "—" if interval is None else interval.text(digits)


def _signed(interval: Interval | None) -> str:
    if interval is None:
        return "—"
    if interval.half_width is None:
        return f"{interval.mean:+.1f} (n={interval.n})"
    return f"{interval.mean:+.1f} ± {interval.half_width:.1f}"


def _plan_blocks(plan: Plan, runs: list[RunSpec], work_dir: Path) -> list:
    subset = work_dir / "corpus_subset.json"
    corpus = json.loads(subset.read_text()) if subset.is_file() else None
    seed_list = ", ".join(str(s) for s in seeds(plan) if s is not None) or str(plan.seed)
    lines = [f"Plan `{plan.name}` (`experiments/claims/plans/{plan.name}.yaml`): L={plan.seq_length}, global batch "
             f"{plan.global_batch}, AdamW lr {plan.lr} {_schedule(plan)}, dropout {plan.hidden_dropout:g} (attention "
             f"{plan.attention_dropout:g}), weight decay {plan.weight_decay:g}, BERT selects "
             f"{plan.bert_mask_prob:.0%} of tokens, {plan.precision}, one process; seeds {seed_list} (a seed sets the initialisation, the data order and the masks).",
             f"Corpus: {fmt(corpus['bytes'] / 1e6, 1) if corpus else '?'} MB of the corpus (`--corpus`), round-robin "
             f"over its sources, split {plan.split} (train/held-out/test); tokenizer: unigram, vocab {plan.vocab_size}.",
             f"Probes: frozen encoder, mean-pooled last layer; linear (logistic regression, ridge for STS-B, C by CV "
             f"on train) and k-NN (cosine, k={plan.probe_knn}) on GLUE {', '.join(plan.glue_tasks)} (train "
             f"subsampled to {fmt(plan.probe_max_train, 0)} rows, {_test_rows(plan)})"
             f"{' and the probe tasks ' + ', '.join(plan.jsonl_tasks) if plan.jsonl_tasks else ''}; MTEB-lite "
             f"({_mteb_folders(work_dir)}; {fmt(plan.mteb_lite_max_test, 0) if plan.mteb_lite_max_test else 'all'} "
             f"test rows each) in both readouts (raw, the paper's, and whitened) from the same features{_pooler(plan)}; "
             f"held-out loss on {plan.eval_iters} batches at every checkpoint.",
             f"Budgets: {plan.sample_steps * plan.global_batch} samples; equal compute = BERT's model FLOPs on "
             f"them, {fmt(compute_budget_flops(plan) / 1e12, 2)} TFLOP."]
    rows, seen = [], set()
    for run in runs:
        if arm_of(run) in seen:
            continue
        seen.add(arm_of(run))
        views = "—" if not get_arch(run.arch).uses_views else \
            f"r={run.mask_ratio}, {'2 views' if run.complementary else '1 view'}, decoder {run.decoder_layers}L"
        width = "" if run.decoder_width == 1.0 else f" x{run.decoder_width:g} width"
        rows.append([arm_of(run), run.arch, views + width, run.shape.label, run.train_steps,
                     run_flops_per_sample(plan, run) / 1e9, run.group])
    header = ["arm", "arch", "masking", "encoder", "steps", Column("GFLOP/sample", format=",.3f"), "group"]
    return [Bullets(lines), table(header, rows)]


def _schedule(plan: Plan) -> str:
    decay = plan.training_schedule(plan.sample_steps)
    if not plan.decays:
        return f"constant after {plan.warmup} warm-up steps"
    return (f"WSD: {plan.warmup} warm-up steps, then constant, then a {plan.lr_wsd_decay_style} decay to "
            f"{decay['min_lr']:g} over the last {plan.lr_wsd_decay_fraction:.0%} of each run")


def _loss_blocks(plan: Plan, runs: list[RunSpec], work_dir: Path) -> list:
    """Each arm's held-out loss at its last evaluation beside the floors: the unigram entropy and the untrained
    model (the reference run's loss after its one step)."""
    from .study.data_stage import data_prefix, has_dataset, tokenizer_dir
    from .study.floors import unigram_entropy

    if not has_dataset(work_dir):
        return [Paragraph("Not measured yet (the data stage has not run).")]
    floor = unigram_entropy(data_prefix(work_dir), str(tokenizer_dir(work_dir)))["nats"]
    rows = []
    for arm, by_seed in an.held_out_losses(plan, finished_runs(work_dir, runs), work_dir).items():
        finals = {seed: losses[max(losses)] for seed, losses in by_seed.items()}
        steps = sorted({max(losses) for losses in by_seed.values()})
        below = mean_interval([floor - loss for loss in finals.values()])
        rows.append([arm, ", ".join(map(str, steps)), _text(mean_interval(list(finals.values())), 3),
                     _text(below, 3), ", ".join(f"s{s}: {v:.3f}" for s, v in sorted(finals.items()))])
    losses = table(["arm", "step", "held-out loss (nats) [95%]", "below unigram [95%]", "per seed"], rows)
    return [Paragraph(f"The corpus's unigram entropy under the study's tokenizer is **{floor:.3f} nats** (a model that ignores "
            "context scores this on a masked token); the untrained row is the other floor. BERT's loss is on its "
            "selected tokens (80/10/10), CrossBERT's on every masked position of both views, so the two arms' "
            "losses are different tasks: compare each with the floors, not with each other."), losses]


def _mteb_folders(work_dir: Path) -> str:
    """The MTEB-lite folders the probes scored, read from the first probe JSON that has them."""
    for path in sorted((work_dir / "probes").glob("*/iter_*.json")):
        tasks = (json.loads(path.read_text()).get("mteb_lite") or {}).get("tasks")
        if tasks:
            return ", ".join(tasks)
    return "no folder scored yet"


def _pooler(plan: Plan) -> str:
    if not plan.pooler_pairs:
        return ""
    return (f", and at the budget points after a linear pooler (mean pooling, then a map started at the identity) is "
            f"trained on the frozen features with an in-batch MNRL loss on {fmt(plan.pooler_pairs, 0)} span pairs of "
            f"the corpus, checked against the MTEB-lite test sets")


def _test_rows(plan: Plan) -> str:
    return "**full dev sets**" if plan.probe_max_test is None else f"dev subsampled to {plan.probe_max_test} rows"


def shown_path(target: Path, docs_dir: Path) -> Path:
    """``target`` as the page's readers type it: relative to the repository whose ``docs/`` holds the page, so no
    machine's absolute path is written into the page."""
    try:
        return Path(target).resolve().relative_to(Path(docs_dir).resolve().parent)
    except ValueError:
        return Path(target)


def _sessions_text(records: Path | None, docs_dir: Path) -> str:
    """How many working sessions and CPU-hours the study took, from its records (restarted work included)."""
    if records is None:
        return ""
    from .study.records import sessions_summary

    summary = sessions_summary(records)
    return (f"Over its {summary['sessions']} working session(s) ({summary['invocations']} processes, records in "
            f"`{shown_path(records, docs_dir)}`), the study has used {summary['cpu_hours']:.2f} CPU-hours, work lost "
            "to a session's end included.")


def _cost_blocks(work_dir: Path, status: dict, docs_dir: Path, records: Path | None = None) -> list:
    """Wall seconds of every command and CPU-hours of every stage (``status.json``'s ``cpu_seconds:*`` keys), and
    with records the sessions the study took."""
    log = read_command_log(work_dir)
    train = sum(e["seconds"] for e in log if "cli.pretrain" in " ".join(e["argv"]))
    cpu = {key[len(CPU_KEY):]: value for key, value in status.items() if key.startswith(CPU_KEY)}
    parts = [f"{len(log)} commands ran ({fmt(train / 60, 1)} min of training wall time)."]
    if cpu:
        by_kind: dict[str, float] = {}
        for stage, seconds in cpu.items():
            by_kind[stage.split(":")[0]] = by_kind.get(stage.split(":")[0], 0.0) + seconds
        parts.append("CPU time by stage (this process and its children): " + ", ".join(
            f"{kind} {seconds / 3600:.2f} h" for kind, seconds in by_kind.items()) +
            f"; {sum(by_kind.values()) / 3600:.2f} CPU-hours in all.")
    if records is not None:
        parts.append(_sessions_text(records, docs_dir))
    blocks = [Paragraph(" ".join(parts))]
    notes = (records if records is not None and (records / "NOTES.md").is_file() else work_dir) / "NOTES.md"
    if notes.is_file():
        blocks += [Paragraph("How the study was driven (`NOTES.md`):"), Paragraph(notes.read_text().strip())]
    return blocks


def _budget_table(points: dict[str, dict[int, an.Point]], reference: dict[int, an.Point]):
    """Arm x metric, mean ± 95% interval over the seeds; the untrained encoder last."""
    rows = []
    for arm, by_seed in [*points.items(), (REFERENCE, reference)]:
        step = sorted({p.iteration for p in by_seed.values()})
        rows.append([arm, "/".join(str(s) for s in step) or "—", len(by_seed),
                     *[_text(an.cell(by_seed, metric)) for metric in an.METRICS]])
    return table(["arm", "step", "seeds", *an.METRICS.values()], rows)


def _difference_table(points: dict[str, dict[int, an.Point]], reference: dict[int, an.Point]) -> tuple:
    """CrossBERT arm minus BERT (and BERT minus untrained), paired by seed, per metric, with verdicts."""
    bert = points.get("bert", {})
    pairs = [(arm, f"{arm} − bert", points[arm], bert) for arm in CHALLENGERS if arm in points]
    pairs.append(("bert", "bert − untrained", bert, reference))
    rows, verdicts = [], {}
    for arm, label, a, b in pairs:
        diffs = {metric: an.difference(a, b, metric) for metric in an.METRICS}
        verdicts[arm] = diffs
        rows.append([label, *[f"{_signed(d)} ({_short(verdict(d, 'better', 'worse'))})" for d in diffs.values()]])
    return table(["difference", *an.METRICS.values()], rows), verdicts


def _short(text: str) -> str:
    return "n.r." if text == NOT_RESOLVED else text


def _claim_one(plan: Plan, curves: an.StudyCurves) -> tuple[list, dict]:
    parts, found = [], {}
    for budget, title in (("samples", f"Equal samples ({plan.sample_steps * plan.global_batch} sequences)"),
                          ("flops", f"Equal compute (BERT's {fmt(compute_budget_flops(plan) / 1e12, 2)} TFLOP, "
                                    "nearest checkpoint)")):
        points = an.read_budget(plan, curves.main, budget)
        differences, verdicts = _difference_table(points, curves.reference)
        found[budget] = verdicts
        parts += [Heading(title, 4), Paragraph("Mean ± 95% interval over the seeds (score 0-100):"),
                  _budget_table(points, curves.reference),
                  Paragraph("Paired differences (per seed, then mean ± 95% interval); n.r. = not resolved at this "
                            "scale:"), differences]
    return parts, found


def _calibration_blocks(plan: Plan, curves: an.StudyCurves) -> list:
    rows = an.calibration(plan, curves)
    if not rows:
        return [Paragraph("Not measured yet (BERT's checkpoints and the untrained reference are probed first).")]
    calibration = table(["BERT step", "samples", "BERT GLUE linear", "BERT − untrained (paired)", "verdict"],
                           [[r["iteration"], r["samples"], _text(r["bert"]), _signed(r["gap"]),
                             verdict(r["gap"], "beats untrained", "below untrained")] for r in rows])
    first = next((r for r in rows if r["gap"] is not None and r["gap"].low is not None and r["gap"].low > 0), None)
    if first:
        found = (f"The smallest budget at which BERT beats the untrained encoder on the frozen GLUE average by more "
                 f"than its seed noise: **{first['samples']} samples** (step {first['iteration']}, "
                 f"{_signed(first['gap'])} points).")
    elif any(r["gap"] is None for r in rows):
        found = ("Not answered yet: the untrained reference or a paired seed is not probed at these steps (the table "
                 "fills in as runs are sealed).")
    else:
        found = ("**No budget in this plan gets BERT above the untrained encoder by more than its seed noise** on the "
                 "frozen GLUE average; the largest budget that fits this machine was run and everything is reported.")
    return [calibration, Paragraph(found)]


def _task_calibration_blocks(plan: Plan, curves: an.StudyCurves) -> list:
    """The calibration per task at the sample budget, with the tasks where BERT is ahead or behind named."""
    rows = an.task_calibration(plan, curves)
    if not rows:
        return []
    body = [[r["task"], _text(r["untrained"]), _text(r["bert"]), _with_verdict(r["gap"]), _text(r["crossbert-compl"]),
             _with_verdict(r["compl_gap"])] for r in rows]
    named = {side: [r["task"] for r in rows if verdict(r["gap"], "ahead", "behind") == side]
             for side in ("ahead", "behind")}
    crossbert = {side: [r["task"] for r in rows if verdict(r["compl_gap"], "ahead", "behind") == side]
                 for side in ("ahead", "behind")}
    found = (f"Beyond the seed noise, BERT is ahead of the untrained encoder on {', '.join(named['ahead']) or 'no task'} "
             f"and behind on {', '.join(named['behind']) or 'no task'}; the other "
             f"{len(rows) - len(named['ahead']) - len(named['behind'])} tasks are not resolved at this scale. "
             f"CrossBERT complementary is ahead of BERT on {', '.join(crossbert['ahead']) or 'no task'} and behind on "
             f"{', '.join(crossbert['behind']) or 'no task'}.")
    return [Paragraph(f"Per task at the sample budget (step {plan.sample_steps}; mean ± 95% interval over the seeds; "
                      "differences paired by seed):"),
            table(["task", "untrained", "BERT", "BERT − untrained", "CrossBERT compl.", "compl. − BERT"], body),
            Paragraph(found)]


def _with_verdict(difference) -> str:
    """A paired difference with its verdict word (ahead, behind, or not resolved)."""
    return f"{_signed(difference)} ({_short(verdict(difference, 'ahead', 'behind'))})"


def _efficiency_blocks(plan: Plan, curves: an.StudyCurves) -> tuple[list, dict]:
    rows, found = [], {}
    for arm in CHALLENGERS:
        if arm not in curves.main or "bert" not in curves.main:
            continue
        result = an.efficiency(plan, curves.main, arm)
        found[arm] = result
        per_seed = ", ".join(f"s{s}: {'≥ ' if s in result['bounded'] else ''}{f:.2f}x"
                             for s, f in sorted(result["factors"].items())) or "—"
        missed = ", ".join(f"s{s}" for s in result["missed"]) or "none"
        rows.append([arm, per_seed, missed, _factor_text(result["interval"])])
    text = Paragraph("Samples an arm needed to reach its seed's BERT score at the sample budget (frozen GLUE linear average, "
            "interpolated between checkpoints); factor = BERT's samples / those. The paper claims 2x. A seed whose "
            "curve never reaches BERT's score has no factor (listed); ≥ marks a seed already there at its first "
            "checkpoint (a lower bound).")
    return [text, table(["arm", "factor per seed", "never reached", "geometric mean [95% interval]"], rows)], found


def _sweep_blocks(plan: Plan, curves: an.StudyCurves) -> tuple[list, str]:
    rows = an.sweep_points(plan, curves)
    sizes = table(["encoder", "seeds", *an.METRICS.values()],
                           [[shape.label, len(points), *[_text(an.cell(points, m)) for m in an.METRICS]]
                            for shape, points in rows])
    steps = []
    for (small, a), (large, b) in zip(rows, rows[1:]):
        diff = paired_difference(an.values(b, an.HEADLINE), an.values(a, an.HEADLINE))
        steps.append((f"{large.label} − {small.label}", diff))
    outcomes = [verdict(d, "rises", "falls") for _, d in steps]
    if steps and all(o == "rises" for o in outcomes):
        overall = "supported: every step up in size raises the score beyond the seed noise"
    elif "falls" in outcomes:
        overall = "contradicted: a larger encoder scores lower beyond the seed noise"
    else:
        overall = NOT_RESOLVED
    lines = [f"{label}: {_signed(d)} ({_short(verdict(d, 'rises', 'falls'))})" for label, d in steps]
    return [Paragraph(f"CrossBERT r=0.5 complementary at three sizes, each after {plan.sweep_steps} steps "
                      f"({plan.sweep_steps * plan.global_batch} samples):"), sizes,
            Paragraph("Paired steps up in size (GLUE linear):"), Bullets(lines)], overall


def _factor_text(interval: Interval | None) -> str:
    """``'1.31x [0.92, 1.86]'``: the geometric mean and its 95% interval."""
    if interval is None:
        return "—"
    return f"{interval.mean:.2f}x" + ("" if interval.low is None else f" [{interval.low:.2f}, {interval.high:.2f}]")


def _efficiency_verdict(result: dict, bert_gain: Interval | None) -> str:
    """2x claim: supported when the interval lies at or above 2, contradicted below it; never from lower
    bounds, and never when BERT's own score is not above the untrained encoder's (reaching it then needs
    no training, so the factor measures nothing); and whether the factor is above 1x."""
    factor = result.get("interval")
    if bert_gain is None or bert_gain.low is None or bert_gain.low <= 0:
        return NOT_RESOLVED + " (BERT's score at the budget is not above the untrained encoder's beyond the noise: " \
                              "reaching it takes no training, so the factor measures nothing)"
    if factor is None or factor.low is None:
        return NOT_RESOLVED + " (fewer than two seeds reached BERT's score)"
    if result["bounded"]:
        return NOT_RESOLVED + " (lower bounds only: the arm was there at its first probed checkpoint)"
    claim = "supported" if factor.low >= 2 else "contradicted" if factor.high < 2 else NOT_RESOLVED
    gain = "above 1x" if factor.low > 1 else "below 1x" if factor.high < 1 else "1x inside the interval"
    return f"{claim} for 2x; {gain}"


def _paragraph(name: str, verdicts: dict, metric: str = an.HEADLINE) -> str:
    parts = []
    for budget, label in (("samples", "equal samples"), ("flops", "equal compute")):
        diff = verdicts.get(budget, {}).get(name, {}).get(metric)
        parts.append(f"{label} {_signed(diff)} ({verdict(diff)})")
    return "; ".join(parts)


def _figures(figures: dict[str, Path | None], docs_dir: Path) -> list:
    shown = [Figure(os.path.relpath(path, docs_dir), key) for key, path in figures.items() if path]
    return shown or [Paragraph("No figures yet.")]


def _verdicts(verdicts: dict, factors: dict, scaling: str) -> list[str]:
    """One item per claim: its verdict at equal samples and equal compute, from the paired intervals."""
    compl = factors.get("crossbert-compl", {})
    return [
        f"**Better frozen representations than BERT** (frozen GLUE linear average, CrossBERT complementary − "
        f"BERT): {_paragraph('crossbert-compl', verdicts)}. Single view: {_paragraph('crossbert-single', verdicts)}. "
        f"Fastest setting: {_paragraph('crossbert-fast', verdicts)}. By readout (complementary − BERT): raw "
        f"(the paper's) {_paragraph('crossbert-compl', verdicts, 'raw_glue_average')}; whitened "
        f"{_paragraph('crossbert-compl', verdicts, 'whitened_glue_average')}; MTEB-lite raw "
        f"{_paragraph('crossbert-compl', verdicts, 'raw_mteb_lite_average')}; MTEB-lite whitened "
        f"{_paragraph('crossbert-compl', verdicts, 'whitened_mteb_lite_average')}; MTEB (frozen, pooler trained) "
        f"{_paragraph('crossbert-compl', verdicts, 'mteb_pooler_average')}.",
        f"**2x sample efficiency** (complementary): factor {_factor_text(compl.get('interval'))}; "
        f"{_efficiency_verdict(compl, verdicts['samples'].get('bert', {}).get(an.HEADLINE))}.",
        f"**Quality rises monotonically with size**: {scaling}.",
        f"**Training helps at all** (BERT − untrained): {_paragraph('bert', verdicts)}."]


def claims_section(plan: Plan, runs: list[RunSpec], work_dir: Path, curves: an.StudyCurves,
                   figures: dict[str, Path | None], docs_dir: Path, status: dict,
                   records: Path | None = None) -> tuple[Heading, list]:
    """The whole study section (its title, then its blocks): verdicts first, then how they were measured."""
    claim_one, verdicts = _claim_one(plan, curves)
    efficiency, factors = _efficiency_blocks(plan, curves)
    sweep, scaling = _sweep_blocks(plan, curves)
    states = [f"`{k}`: {v}" for k, v in status.items()
              if isinstance(v, str) and not k.startswith(CPU_KEY) and not v.startswith("done")]
    title = Heading("The paper's claims, with seeds and intervals" + ("" if plan.name == "cpu" else
                                                                       f" (plan `{plan.name}`)"))
    return title, [
        Heading("Calibration first: does the MLM baseline beat an untrained encoder?", 3),
        *_calibration_blocks(plan, curves), *_task_calibration_blocks(plan, curves),
        Heading("Held-out loss against its floors", 3), *_loss_blocks(plan, runs, work_dir),
        Paragraph("Verdicts (a verdict only where the 95% interval of the paired difference excludes zero):"),
        Bullets(_verdicts(verdicts, factors, scaling)),
        Paragraph("Stages not done when this page was written: " + ("; ".join(states) if states else "none") + "."),
        Heading("What was run", 3), *_plan_blocks(plan, runs, work_dir),
        *_cost_blocks(work_dir, status, docs_dir, records),
        Heading("Claim 1: frozen representations", 3), *claim_one,
        Heading("Claim 2: sample efficiency", 3), *efficiency,
        Heading("Claim 3: model size", 3), *sweep,
        Heading("Figures", 3), *_figures(figures, docs_dir)]
