"""The recipe sweep's section of the results page, from its ``results.json`` (``sweep.collect``).

One table per arm: every row's held-out loss at each quarter of its run, the distance below the unigram
entropy (what context bought), its cost, and the untrained model's loss as the other floor. The row chosen
for the study is the one furthest below the unigram entropy among rows whose loss is the same task: a row
that changes BERT's selection rate changes what its loss measures (more masked tokens, less context), so it
is shown and never chosen by loss.
"""

from __future__ import annotations

from pathlib import Path

from megatron_crossbert.outputs import write_section

SECTION = "recipe-sweep"

NOT_BY_LOSS = ("bert_mask_prob",)
"""Plan fields that change the task a held-out loss measures: rows changing them are not ranked by loss."""


def chosen(rows: list[dict]) -> dict | None:
    """The finished row furthest below the unigram entropy (lowest final loss) among those ranked by loss."""
    ranked = [row for row in rows if not row["untrained"] and row["final_loss"] is not None
              and not any(name in row["changes"] for name in NOT_BY_LOSS)]
    return min(ranked, key=lambda row: row["final_loss"], default=None)


def _changes(row: dict) -> str:
    return ", ".join(f"{key}={value}" for key, value in row["changes"].items()) or "(the base)"


def _loss(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def arm_table(rows: list[dict], unigram: float) -> list[str]:
    """One arm's rows as markdown lines (the chosen row in bold)."""
    best = chosen(rows)
    lines = ["| run | changes | tokens | steps | held-out loss at 1/4, 1/2, 3/4 | final | below unigram | CPU-min |",
             "|---|---|---:|---:|---|---:|---:|---:|"]
    for row in rows:
        losses = [float(v) for _, v in sorted(row["losses"].items(), key=lambda kv: int(kv[0]))]
        quarters = ", ".join(f"{v:.2f}" for v in losses[:-1]) if not row["untrained"] else "—"
        final = row["final_loss"]
        below = "—" if final is None else f"{unigram - final:+.2f}"
        cpu = f"{row['cpu_s'] / 60:.1f}" if "cpu_s" in row else "—"
        name = f"**{row['name']}**" if row is best else row["name"]
        what = "untrained (one step)" if row["untrained"] else _changes(row)
        lines.append(f"| {name} | {what} | {row['tokens']:,} | {row['steps']} | {quarters} | {_loss(final)} | "
                     f"{below} | {cpu} |")
    return lines


def sweep_text(results: dict) -> str:
    """The section's markdown: floors, one table per arm, the choice per arm."""
    floor = results["unigram"]
    h = floor["nats"]
    out = [f"### Recipe sweep (`{results['sweep']}`, base plan `{results['plan']}`, seed {results['seed']})", "",
           f"Floors: the corpus's unigram entropy under the study's tokenizer is **{h:.3f} nats** "
           f"({floor['tokens']:,} tokens, {floor['types']:,} token types; ln V = {floor['ln_vocab']:.3f}); the "
           "untrained model's held-out loss is each arm's `untrained` row. \"below unigram\" is the entropy minus "
           "the final held-out loss: what the model learned from context. Bold: the row each arm's study "
           "recipe is taken from (lowest final loss among rows that keep the task; rows changing "
           f"{', '.join(NOT_BY_LOSS)} measure another task and are not ranked).", ""]
    cpu = sum(row.get("cpu_s", 0.0) for row in results["rows"])
    for arm in dict.fromkeys(row["arm"] for row in results["rows"]):
        rows = [row for row in results["rows"] if row["arm"] == arm]
        best = chosen(rows)
        out += [f"**{arm}**" + (f": chosen `{best['name']}` ({_changes(best)}), {h - best['final_loss']:.2f} nats "
                                f"below unigram" if best else ": no finished row yet"), "", *arm_table(rows, h), ""]
    done = sum(row["done"] for row in results["rows"])
    out.append(f"{done} of {len(results['rows'])} runs finished; {cpu / 3600:.2f} CPU-hours of training "
               f"(results.json written {results['written_utc']}).")
    return "\n".join(out)


def write_sweep_section(page: Path, results: dict) -> Path:
    return write_section(page, SECTION, sweep_text(results), "python -m experiments.claims.sweep")
