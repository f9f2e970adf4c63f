"""Turn probe JSONs into curves and the three comparisons the results page reports.

* Curves: per main run, probe scores at every checkpoint against samples seen and model FLOPs.
* Equal samples: each model at the sample budget (``plan.sample_steps``).
* Equal compute: each model at the checkpoint whose FLOPs are closest to BERT's budget.
* Samples-to-match: how many samples a CrossBERT run needed to reach BERT's final average score
  (linear interpolation between checkpoints); BERT's samples divided by that is the measured
  sample-efficiency factor (the paper claims 2x). "not reached" when the curve never gets there;
  an upper bound ("≤") when the first checkpoint already gets there.
* Size sweep: CrossBERT complementary at three sizes, same samples; monotonic or not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from megatron_crossbert.arch import get_arch
from megatron_crossbert.benchmarking.study.plan import Plan, RunSpec, flops_per_sample
from megatron_crossbert.benchmarking.study.probe_stage import load_probe_results


@dataclass
class Point:
    iteration: int
    samples: int
    flops: float
    average: float | None
    glue_average: float | None
    tasks: dict[str, float] = field(default_factory=dict)
    mteb_lite_average: float | None = None
    """Average main score on the MTEB-lite folders (STS Spearman, Banking77 accuracy), when scored."""


def _point(plan: Plan, per_sample: float, iteration: int, report: dict) -> Point:
    samples = iteration * plan.global_batch
    summary = report.get("summary", {})
    tasks = {name: entry["score"] for name, entry in report.get("tasks", {}).items()}
    mteb = (report.get("mteb_lite") or {}).get("average")
    return Point(iteration, samples, samples * per_sample, summary.get("average"), summary.get("glue_average"), tasks,
                 mteb)


def curve(plan: Plan, run: RunSpec, work_dir: Path) -> list[Point]:
    per_sample = flops_per_sample(plan, run.arch, run.mask_ratio, run.complementary, run.shape)
    return [_point(plan, per_sample, it, rep) for it, rep in sorted(load_probe_results(work_dir, run).items())]


def at_iteration(points: list[Point], iteration: int) -> Point | None:
    return next((p for p in points if p.iteration == iteration), None)


def closest_flops(points: list[Point], flops: float) -> Point | None:
    """The checkpoint nearest the FLOPs budget (ties go to the cheaper one)."""
    if not points:
        return None
    return min(points, key=lambda p: (abs(p.flops - flops), p.flops))


def samples_to_reach(points: list[Point], score: float) -> float | None:
    """Interpolated samples at which the average score first reaches ``score`` (None if never)."""
    previous = Point(0, 0, 0.0, None, None)
    for point in points:
        if point.average is not None and point.average >= score:
            if previous.average is None or previous.average >= score:
                return float(point.samples)
            frac = (score - previous.average) / (point.average - previous.average)
            return previous.samples + frac * (point.samples - previous.samples)
        previous = point
    return None


def sample_efficiency(curves: dict[str, list[Point]], plan: Plan) -> dict[str, dict]:
    """Per CrossBERT run: samples to match BERT's score at the sample budget, and the factor."""
    bert_final = at_iteration(curves.get("bert", []), plan.sample_steps)
    if bert_final is None or bert_final.average is None:
        return {}
    out = {}
    for name, points in curves.items():
        if name == "bert":
            continue
        needed = samples_to_reach(points, bert_final.average)
        first = bool(points) and needed is not None and needed == points[0].samples
        out[name] = {"bert_score": bert_final.average, "bert_samples": bert_final.samples,
                     "samples_needed": needed, "factor": bert_final.samples / needed if needed else None,
                     "at_first_point": first,
                     "stays_above": needed is not None and all(
                         p.average is not None and p.average >= bert_final.average
                         for p in points if p.samples >= needed)}
    return out


def sweep_table(plan: Plan, runs: list[RunSpec], work_dir: Path) -> list[dict]:
    """One row per sweep size at ``plan.sweep_steps`` (the main shape comes from the main compl run)."""
    rows = []
    for shape in plan.sweep_shapes:
        run = next((r for r in runs if r.shape == shape and r.complementary and get_arch(r.arch).uses_views
                    and (r.group == "sweep" or (r.group == "main" and shape == plan.main_shape))), None)
        point = at_iteration(curve(plan, run, work_dir), plan.sweep_steps) if run else None
        rows.append({"shape": shape, "run": run.name if run else None, "point": point,
                     "flops_per_sample": flops_per_sample(plan, "crossbert", 0.5, True, shape)})
    return rows


def reference_point(plan: Plan, runs: list[RunSpec], work_dir: Path) -> Point | None:
    """The probe score of the untrained encoder (the 'reference' run), if measured."""
    run = next((r for r in runs if r.group == "reference"), None)
    points = curve(plan, run, work_dir) if run else []
    return points[-1] if points else None


def is_monotonic(rows: list[dict]) -> bool | None:
    scores = [r["point"].average for r in rows if r["point"] is not None and r["point"].average is not None]
    if len(scores) < len(rows):
        return None
    return all(b > a for a, b in zip(scores, scores[1:]))
