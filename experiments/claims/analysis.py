"""Turn probe JSONs and held-out losses into seeded curves and the comparisons the claims need.

* A ``Point`` is one probed checkpoint: samples, FLOPs, the linear and k-NN probe averages, MTEB-lite (both readouts),
  the held-out loss. A run's curve is its points; an arm's curves are its runs, by seed.
* ``METRICS`` names the numbers every table shows; the headline (calibration, sample efficiency,
  verdict sentences) is the frozen GLUE average of the linear probe.
* Equal samples reads every arm at ``plan.sample_steps``; equal compute at the checkpoint whose FLOPs
  are nearest BERT's budget. Differences to BERT (and to the untrained reference) are paired by seed.
* Sample efficiency per seed: BERT's samples at the budget divided by the samples the CrossBERT arm
  needed to reach that seed's BERT score (linear interpolation between checkpoints).
* Calibration: BERT's checkpoints against the untrained reference, paired by seed; the first budget
  whose interval lies above zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .study.plan import Plan, RunSpec, arm_of, compute_budget_flops, run_flops_per_sample
from .study.probe_stage import load_probe_results
from .study.stats import Interval, mean_interval, paired_difference, ratio_interval
from .study.train_stage import valid_losses
from megatron_crossbert.evaluation.tasks.metrics import average_scores

HEADLINE = "glue_average"

METRICS = {"glue_average": "GLUE linear", "raw_glue_average": "GLUE linear, raw",
           "whitened_glue_average": "GLUE linear, whitened", "knn_glue_average": "GLUE k-NN",
           "raw_mteb_lite_average": "MTEB-lite, raw", "whitened_mteb_lite_average": "MTEB-lite, whitened",
           "mteb_pooler_average": "MTEB (frozen, pooler trained)",
           "in_domain_average": "probe tasks", "average": "all probes"}
"""Point attribute -> column label: the frozen GLUE average (linear probe on the recipe's readout, and on
each readout: raw, the paper's, and whitened; k-NN probe), MTEB-lite (frozen, each readout; after a pooler is
trained, at the budget points), the JSONL probe tasks' average and the average over every probe task."""


@dataclass
class Point:
    iteration: int
    samples: int
    flops: float
    average: float | None = None
    glue_average: float | None = None
    knn_glue_average: float | None = None
    in_domain_average: float | None = None
    mteb_lite_average: float | None = None
    valid_loss: float | None = None
    tasks: dict[str, float] = field(default_factory=dict)
    raw_glue_average: float | None = None
    whitened_glue_average: float | None = None
    mteb_pooler_average: float | None = None
    raw_mteb_lite_average: float | None = None
    whitened_mteb_lite_average: float | None = None
    mteb_raw_tasks: dict[str, float] = field(default_factory=dict)
    """MTEB-lite's score per task in the raw readout (the paper's), by the task's short name."""


def _raw_mteb_tasks(mteb: dict) -> dict[str, float]:
    """{short name: raw score} from a probe JSON's ``mteb_lite`` block (empty when it has no raw readout)."""
    per_task = (mteb.get("readouts") or {}).get("tasks") or {}
    return {short: per_task[full]["raw"] for short, full in (mteb.get("names") or {}).items()
            if (per_task.get(full) or {}).get("raw") is not None}


def _point(plan: Plan, per_sample: float, iteration: int, report: dict, loss: float | None) -> Point:
    samples = iteration * plan.global_batch
    summary = report.get("summary", {})
    tasks = {name: entry["score"] for name, entry in report.get("tasks", {}).items()}
    in_domain = average_scores({name: score for name, score in tasks.items() if not report["tasks"][name]["spec"]["glue"]})
    readouts, mteb = summary.get("readouts") or {}, report.get("mteb_lite") or {}
    mteb_readouts = (mteb.get("readouts") or {}).get("average") or {}
    return Point(iteration, samples, samples * per_sample, summary.get("average"), summary.get("glue_average"),
                 summary.get("knn_glue_average"), in_domain, mteb.get("average"), loss,
                 tasks, (readouts.get("raw") or {}).get("glue_average"),
                 (readouts.get("whitened") or {}).get("glue_average"), (report.get("mteb_pooler") or {}).get("average"),
                 raw_mteb_lite_average=mteb_readouts.get("raw"),
                 whitened_mteb_lite_average=mteb_readouts.get("whitened"), mteb_raw_tasks=_raw_mteb_tasks(mteb))


def curve(plan: Plan, run: RunSpec, work_dir: Path) -> list[Point]:
    per_sample = run_flops_per_sample(plan, run)
    losses = valid_losses(work_dir, run)
    return [_point(plan, per_sample, it, rep, losses.get(it))
            for it, rep in sorted(load_probe_results(work_dir, run).items())]


def arm_curves(plan: Plan, runs: list[RunSpec], work_dir: Path, group: str) -> dict[str, dict[int, list[Point]]]:
    """{arm: {seed: curve}} for the runs of ``group`` (main, sweep or reference)."""
    out: dict[str, dict[int, list[Point]]] = {}
    for run in runs:
        if run.group == group:
            seed = plan.seed if run.seed is None else run.seed
            out.setdefault(arm_of(run), {})[seed] = curve(plan, run, work_dir)
    return out


def at_iteration(points: list[Point], iteration: int) -> Point | None:
    return next((p for p in points if p.iteration == iteration), None)


def closest_flops(points: list[Point], flops: float) -> Point | None:
    """The checkpoint nearest the FLOPs budget (ties go to the cheaper one)."""
    return min(points, key=lambda p: (abs(p.flops - flops), p.flops)) if points else None


@dataclass
class StudyCurves:
    """Every probed point of a study, read once per report (probe JSONs and TensorBoard events)."""

    main: dict[str, dict[int, list[Point]]]
    """{arm: {seed: curve}} of the main runs."""
    sweep: dict[str, dict[int, list[Point]]]
    """{sweep name: {seed: curve}} of the size sweep's runs (the main shape is the main compl arm's)."""
    reference: dict[int, Point]
    """{seed: the untrained encoder's point}."""

    def of_runs(self, plan: Plan, runs: list[RunSpec]) -> StudyCurves:
        """These curves restricted to ``runs`` (the page's tables read the finished runs), no file read again."""
        keep = {(arm_of(run), plan.seed if run.seed is None else run.seed) for run in runs}

        def pick(curves: dict[str, dict[int, list[Point]]]) -> dict[str, dict[int, list[Point]]]:
            kept = {arm: {seed: points for seed, points in by_seed.items() if (arm, seed) in keep}
                    for arm, by_seed in curves.items()}
            return {arm: by_seed for arm, by_seed in kept.items() if by_seed}

        references = {plan.seed if run.seed is None else run.seed for run in runs if run.group == "reference"}
        return StudyCurves(pick(self.main), pick(self.sweep),
                           {seed: point for seed, point in self.reference.items() if seed in references})


def load_curves(plan: Plan, runs: list[RunSpec], work_dir: Path) -> StudyCurves:
    refs = arm_curves(plan, runs, work_dir, "reference")
    return StudyCurves(arm_curves(plan, runs, work_dir, "main"), arm_curves(plan, runs, work_dir, "sweep"),
                       {seed: points[-1] for curves in refs.values() for seed, points in curves.items() if points})


def held_out_losses(plan: Plan, runs: list[RunSpec], work_dir: Path) -> dict[str, dict[int, dict[int, float]]]:
    """{arm: {seed: {iteration: held-out loss}}} of the main and reference runs, every evaluation (not only the
    probed checkpoints): the loss curves and the floors table read them."""
    out: dict[str, dict[int, dict[int, float]]] = {}
    for run in runs:
        losses = valid_losses(work_dir, run) if run.group in ("main", "reference") else {}
        if losses:
            out.setdefault(arm_of(run), {})[plan.seed if run.seed is None else run.seed] = losses
    return out


def read_budget(plan: Plan, curves: dict[str, dict[int, list[Point]]], budget: str) -> dict[str, dict[int, Point]]:
    """{arm: {seed: point}} at ``budget``: 'samples' (the sample budget) or 'flops' (BERT's FLOPs)."""
    flops = compute_budget_flops(plan)
    out = {}
    for arm, by_seed in curves.items():
        picked = {seed: at_iteration(points, plan.sample_steps) if budget == "samples" else closest_flops(points, flops)
                  for seed, points in by_seed.items()}
        out[arm] = {seed: point for seed, point in picked.items() if point is not None}
    return out


def values(points: dict[int, Point], metric: str) -> dict[int, float]:
    return {seed: getattr(p, metric) for seed, p in points.items() if getattr(p, metric) is not None}


def cell(points: dict[int, Point], metric: str) -> Interval | None:
    return mean_interval(list(values(points, metric).values()))


def difference(a: dict[int, Point], b: dict[int, Point], metric: str) -> Interval | None:
    return paired_difference(values(a, metric), values(b, metric))


def samples_to_reach(points: list[Point], score: float, metric: str = HEADLINE) -> float | None:
    """Interpolated samples at which ``metric`` first reaches ``score`` (None if never)."""
    previous: Point | None = None
    for point in points:
        value = getattr(point, metric)
        if value is not None and value >= score:
            before = None if previous is None else getattr(previous, metric)
            if before is None or before >= score:
                return float(point.samples)
            frac = (score - before) / (value - before)
            return previous.samples + frac * (point.samples - previous.samples)
        previous = point
    return None


def efficiency(plan: Plan, curves: dict[str, dict[int, list[Point]]], arm: str) -> dict:
    """Per seed, BERT's samples over the samples ``arm`` needed to reach BERT's budget score; the
    geometric-mean factor with its interval over the seeds where the arm got there. A seed already there
    at its first checkpoint gives only a lower bound (``bounded``): it may have got there sooner."""
    factors, missed, bounded = {}, [], []
    for seed, bert_points in curves.get("bert", {}).items():
        bert = at_iteration(bert_points, plan.sample_steps)
        if bert is None or bert.glue_average is None or not curves[arm].get(seed):
            continue
        needed = samples_to_reach(curves[arm][seed], bert.glue_average)
        if needed:
            factors[seed] = bert.samples / needed
            if needed == curves[arm][seed][0].samples:
                bounded.append(seed)
        else:
            missed.append(seed)
    return {"factors": factors, "missed": missed, "bounded": bounded, "interval": ratio_interval(list(factors.values()))}


def calibration(plan: Plan, curves: StudyCurves) -> list[dict]:
    """BERT minus the untrained encoder per checkpoint (paired by seed), on the headline metric."""
    bert = curves.main.get("bert", {})
    refs = values(curves.reference, HEADLINE)
    iterations = sorted({p.iteration for points in bert.values() for p in points})
    rows = []
    for it in iterations:
        scores = {seed: getattr(p, HEADLINE) for seed, pts in bert.items() if (p := at_iteration(pts, it))
                  and getattr(p, HEADLINE) is not None}
        rows.append({"iteration": it, "samples": it * plan.global_batch, "bert": mean_interval(list(scores.values())),
                     "gap": paired_difference(scores, refs)})
    return rows


def task_calibration(plan: Plan, curves: StudyCurves) -> list[dict]:
    """Per probe task at the sample budget: the untrained encoder, BERT, BERT minus untrained (paired by seed),
    and CrossBERT complementary minus BERT. An average over tasks that sit at chance for every encoder is noise,
    so the per-task rows show which tasks carry a difference. GLUE and the probe tasks read the recipe's
    readout; MTEB-lite tasks the raw one (the paper's)."""
    budget = read_budget(plan, curves.main, "samples")
    arms = {"untrained": curves.reference, "bert": budget.get("bert", {}),
            "crossbert-compl": budget.get("crossbert-compl", {})}

    def scores(points: dict[int, Point], task: str, mteb: bool) -> dict[int, float]:
        return {seed: got for seed, p in points.items()
                if (got := (p.mteb_raw_tasks if mteb else p.tasks).get(task)) is not None}

    names = [(t, False) for t in dict.fromkeys(t for p in arms["bert"].values() for t in p.tasks)]
    names += [(t, True) for t in dict.fromkeys(t for p in arms["bert"].values() for t in p.mteb_raw_tasks)]
    rows = []
    for task, mteb in names:
        per_arm = {arm: scores(points, task, mteb) for arm, points in arms.items()}
        rows.append({"task": f"{task} (MTEB-lite, raw)" if mteb else task,
                     **{arm: mean_interval(list(v.values())) for arm, v in per_arm.items()},
                     "gap": paired_difference(per_arm["bert"], per_arm["untrained"]),
                     "compl_gap": paired_difference(per_arm["crossbert-compl"], per_arm["bert"])})
    return rows


def sweep_points(plan: Plan, curves: StudyCurves) -> list[tuple]:
    """(shape, {seed: point at sweep_steps}) per sweep size, smallest first; the main shape comes from the
    main complementary arm's checkpoint at the same step."""
    main = curves.main.get("crossbert-compl", {})
    rows = []
    for shape in plan.sweep_shapes:
        by_seed = main if shape == plan.main_shape else curves.sweep.get(f"sweep-{shape.label}", {})
        picked = {seed: at_iteration(points, plan.sweep_steps) for seed, points in by_seed.items()}
        rows.append((shape, {seed: p for seed, p in picked.items() if p is not None}))
    return rows
