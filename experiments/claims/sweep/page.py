"""The recipe sweep's section of the results page, from its ``results.json`` (``sweep.collect``).

One table per arm: every row's held-out loss at each quarter of its run, the distance below the unigram
entropy (what context bought), its cost, and the untrained model's loss as the other floor. The row chosen
for the study is the one furthest below the unigram entropy among rows whose loss is the same task: a row
that changes BERT's selection rate changes what its loss measures (more masked tokens, less context), so it
is shown and never chosen by loss.
"""

from __future__ import annotations

from pathlib import Path

from megatron_crossbert.results_page import Column, Heading, Paragraph, Section, Table, publish

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


COLUMNS = [Column("run"), Column("changes"), Column("tokens", "right", ","), Column("steps", "right"),
           Column("held-out loss at 1/4, 1/2, 3/4", format=".2f"), Column("final", "right", ".3f"),
           Column("below unigram", "right", "+.2f"), Column("CPU-min", "right", ".1f")]
"""An arm's table: tokens and steps as counted, losses in nats, CPU time in minutes."""


def _row(row: dict, unigram: float, best: dict | None) -> list:
    losses = [float(v) for _, v in sorted(row["losses"].items(), key=lambda kv: int(kv[0]))]
    final = row["final_loss"]
    return [f"**{row['name']}**" if row is best else row["name"],
            "untrained (one step)" if row["untrained"] else _changes(row), row["tokens"], row["steps"],
            None if row["untrained"] else losses[:-1], final, None if final is None else unigram - final,
            row["cpu_s"] / 60 if "cpu_s" in row else None]


def arm_table(rows: list[dict], unigram: float) -> Table:
    """One arm's rows (the chosen row in bold)."""
    best = chosen(rows)
    return Table(COLUMNS, [_row(row, unigram, best) for row in rows])


def sweep_section(results: dict) -> Section:
    """The section: floors, one table per arm with the choice per arm, then what it cost."""
    floor = results["unigram"]
    h = floor["nats"]
    blocks = [Paragraph(
        f"Floors: the corpus's unigram entropy under the study's tokenizer is **{h:.3f} nats** "
        f"({floor['tokens']:,} tokens, {floor['types']:,} token types; ln V = {floor['ln_vocab']:.3f}); the "
        "untrained model's held-out loss is each arm's `untrained` row. \"below unigram\" is the entropy minus "
        "the final held-out loss: what the model learned from context. Bold: the row each arm's study "
        "recipe is taken from (lowest final loss among rows that keep the task; rows changing "
        f"{', '.join(NOT_BY_LOSS)} measure another task and are not ranked).")]
    cpu = sum(row.get("cpu_s", 0.0) for row in results["rows"])
    for arm in dict.fromkeys(row["arm"] for row in results["rows"]):
        rows = [row for row in results["rows"] if row["arm"] == arm]
        best = chosen(rows)
        blocks += [Paragraph(f"**{arm}**" + (f": chosen `{best['name']}` ({_changes(best)}), "
                                             f"{h - best['final_loss']:.2f} nats below unigram" if best
                                             else ": no finished row yet")), arm_table(rows, h)]
    done = sum(row["done"] for row in results["rows"])
    blocks.append(Paragraph(f"{done} of {len(results['rows'])} runs finished; {cpu / 3600:.2f} CPU-hours of training "
                            f"(results.json written {results['written_utc']})."))
    title = Heading(f"Recipe sweep (`{results['sweep']}`, base plan `{results['plan']}`, seed {results['seed']})", 3)
    return Section(SECTION, title, f"written by python -m experiments.claims.sweep --sweep {results['sweep']}",
                   results["written_utc"], blocks)


def write_sweep_section(page: Path, results: dict) -> Path:
    return publish(page, sweep_section(results))
