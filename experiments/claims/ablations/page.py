"""The collapse ablations' section of the results page, from their ``results.json`` (``ablations.collect``).

One table: every row's frozen GLUE (raw and whitened readouts), MTEB-lite raw, and the effective rank and mean
pairwise cosine of its pooled features, with its CPU cost. Under it, the cause the numbers name: the row that
raises CrossBERT's effective rank most over the study's reading, with what it does to the raw scores. The page
states what was measured; which ablation explains the collapse is read from these differences, one seed each.
"""

from __future__ import annotations

from pathlib import Path

from megatron_crossbert.results_page import Column, Heading, Paragraph, Section, Table, publish

from .page_seeds import early_seed_blocks, final_seed_blocks

SECTION = "collapse-ablations"


COLUMNS = [Column("model"), Column("change"), *[Column(name, "right", ".1f") for name in (
    "GLUE raw", "GLUE whitened", "MTEB-lite raw", "effective rank / dim")], Column("mean cosine", "right", ".3f"),
    Column("held-out loss", "right", ".3f"), Column("CPU-min", "right", ".1f")]
"""The table's columns: scores 0-100, the effective rank (over the feature dimension), the run's held-out loss in
nats at that checkpoint (reconstruction for CrossBERT, MLM for BERT), CPU time in minutes."""


TABLE_GROUPS = ("probe-time", "decoder", "final")
"""The groups of the main table (final checkpoints, at the table's seed); trajectory and geometry rows get their
own tables."""


def main_rows(rows: list[dict], seed: int | None = 1) -> list[dict]:
    """The main table's rows, group by group: the final checkpoints read at ``seed`` (other seeds are paired in
    ``page_seeds``)."""
    return [row for group in TABLE_GROUPS for row in rows if row["group"] == group and row.get("seed") in (seed, None)]


def _rank(row: dict) -> float | str | None:
    """The effective rank, with ' / dim' where the row knows its feature dimension."""
    rank = row["effective_rank"]
    return f"{'—' if rank is None else f'{rank:.1f}'} / {row['dim']}" if "dim" in row else rank


def _row(row: dict) -> list:
    if not row["done"]:
        return [row["model"], row["what"], "not measured yet", None, None, None, None, None, None]
    cost = "(the study's reading, first row)" if row.get("same_as") else row.get("cpu_s", 0.0) / 60
    return [row["model"], row["what"], row["glue_raw"], row["glue_whitened"], row["mteb_raw"], _rank(row),
            row["mean_cosine"], row.get("valid_loss"), cost]


def strongest(rows: list[dict], baseline_key: str) -> tuple[dict, dict] | None:
    """(the study's CrossBERT reading, the CrossBERT row whose effective rank rises most above it), or None
    while either is unmeasured."""
    base = next((row for row in rows if row["key"] == baseline_key and row["done"]), None)
    others = [row for row in main_rows(rows) if row["done"] and row["key"] != baseline_key
              and not row.get("same_as") and row["model"].startswith("crossbert")]
    if base is None or not others:
        return None
    return base, max(others, key=lambda row: row["effective_rank"])


def _delta(new, old, digits: int = 1) -> str:
    return "—" if new is None or old is None else f"{new - old:+.{digits}f}"


RESTORED = 0.5
"""A row restores CrossBERT's rank when it reaches this fraction of BERT's rank read the same way (the study's
reading of BERT's seed-1 run)."""


def _restored(best: dict, rows: list[dict]) -> str:
    """Whether ``best`` brings CrossBERT's rank to ``RESTORED`` of BERT's, in words (empty while BERT's reading is
    unmeasured)."""
    bert = next((row for row in rows if row["group"] == "probe-time" and row["model"].startswith("bert")
                 and row["done"]), None)
    if bert is None:
        return ""
    share = best["effective_rank"] / bert["effective_rank"]
    if share >= RESTORED:
        return f" It restores the rank to {share:.0%} of BERT's {bert['effective_rank']:.1f}."
    return (f" **No final-checkpoint row restores the rank**: the highest is {share:.0%} of BERT's "
            f"{bert['effective_rank']:.1f} (restoring = at least {RESTORED:.0%}).")


def cause_text(rows: list[dict]) -> str:
    """The sentence naming the row that restores the most rank, and by how much it moves the raw scores."""
    baseline = next((row["key"] for row in rows if row["group"] == "probe-time"
                     and row["model"].startswith("crossbert")), None)
    found = strongest(rows, baseline) if baseline else None
    if found is None:
        return "The cause is named once the study's CrossBERT reading and at least one ablation are measured."
    base, best = found
    return (f"Largest rise in CrossBERT's effective rank: **{best['model']}, {best['what']}**, "
            f"{base['effective_rank']:.1f} -> {best['effective_rank']:.1f} (mean cosine "
            f"{base['mean_cosine']:.3f} -> {best['mean_cosine']:.3f}); raw GLUE "
            f"{_delta(best['glue_raw'], base['glue_raw'])}, MTEB-lite raw "
            f"{_delta(best['mteb_raw'], base['mteb_raw'])}, "
            f"whitened GLUE {_delta(best['glue_whitened'], base['glue_whitened'])} points against the study's reading."
            f"{_restored(best, rows)} One seed per row: read differences of a few points as noise.")


def trajectory_blocks(rows: list[dict]) -> list:
    """Effective rank and mean cosine of each run along its training, the study's reading: one row per run, one
    column per probe step, the final checkpoint last (its row in the main table)."""
    points = [row for row in rows if row["group"] == "trajectory"]
    if not points:
        return []
    by_key = {row["key"]: row for row in rows}
    steps = sorted({row["step"] for row in points})
    at = {(row["base"], row["step"]): row for row in points}
    body = [[by_key[base]["model"], *[_rank_cosine(at.get((base, step))) for step in steps], _rank_cosine(by_key[base])]
            for base in dict.fromkeys(row["base"] for row in points)]
    header = [Column("run"), *[Column(f"step {step}", "right") for step in steps], Column("final", "right")]
    return [Paragraph("Along training (all tokens, after the final norm): effective rank / mean cosine of the pooled "
                      "features at each probe step."), Table(header, body)]


GEOMETRY_COLUMNS = [Column("run"), Column("step", "right"), *[Column(name, "right", ".2f") for name in (
    "token rank", "1st direction", "token id", "position", "pooled 1st ~ length |r|")]]
"""The token-geometry table: the token states' effective rank, then shares of their variance (on the first
principal direction, explained by the token id, by the absolute position), then the length correlation."""


def geometry_blocks(rows: list[dict]) -> list:
    """Where each run's token-state variance lies, step by step (``evaluation.token_geometry``)."""
    points = [row for row in rows if row["group"] == "geometry"]
    measured = [row for row in points if row["done"]]
    if not measured:
        return []
    body = [[row["model"], row["step"], row["token_effective_rank"], row["pc1_share"], row["identity_share"],
             row["position_share"], row["pooled_length_r"]] for row in measured]
    pending = len(points) - len(measured)
    return [Paragraph("Where the token states' variance lies (all tokens, after the final norm, on a fixed sample of "
                      "GLUE test texts): their effective rank; the shares of their variance on the first principal "
                      "direction, explained by the token id and by the absolute position; and |r| between the "
                      "mean-pooled features' first principal score and the text's length in tokens. A run whose "
                      "token states carry position more than words gives pooled features that mostly say how "
                      "long the text is." + (f" {pending} points of runs still training are not measured yet."
                                             if pending else "")), Table(GEOMETRY_COLUMNS, body),
            *([Paragraph(text)] if (text := positions_text(rows)) else [])]


def positions_text(rows: list[dict]) -> str:
    """Each decoder that adds positions to what it reads against its counterpart, at every step both runs'
    token geometry reached: the share of token-state variance the position explains, and the token rank."""
    by_key = {row["key"]: row for row in rows}
    geometry = {(row["base"], row["step"]): row for row in rows if row["group"] == "geometry" and row["done"]}
    found = []
    for row in rows:
        if row["group"] != "decoder" or not row.get("counterpart"):
            continue
        other = by_key[row["counterpart"]].get("same_as") or row["counterpart"]
        for step in sorted(step for base, step in geometry if base == row["key"]):
            if (other, step) in geometry:
                a, b = geometry[(other, step)], geometry[(row["key"], step)]
                found.append(f"{row['key']} against {row['counterpart']} at step {step}: position share "
                             f"{a['position_share']:.2f} -> {b['position_share']:.2f}, token rank "
                             f"{a['token_effective_rank']:.1f} -> {b['token_effective_rank']:.1f}, first direction "
                             f"{a['pc1_share']:.2f} -> {b['pc1_share']:.2f}")
    if not found:
        return ""
    return ("Decoders that add each visible token's position to what they read, against the same decoder without: "
            + "; ".join(found) + ".")


EARLY_COLUMNS = [Column("run"), Column("change"), Column("step", "right"), *[Column(name, "right", ".1f") for name in (
    "GLUE raw", "GLUE whitened", "effective rank")], Column("mean cosine", "right", ".3f"),
    *[Column(name, "right", ".2f") for name in ("token rank", "token id", "position", "1st direction")]]
"""The early table: the pooled features' reading, then the token states' geometry, all at one step."""


def early_blocks(rows: list[dict], seed: int | None = 1) -> list:
    """Each early variant at ``seed`` (the seed the trajectory rows read) beside the study's runs read at the same
    step, with the token geometry of each there, and a sentence: how far the variant moves CrossBERT's rank
    towards BERT's; then every seed, paired (``early_seed_blocks``)."""
    early = [row for row in rows if row["group"] == "early" and row.get("seed", seed) in (seed, None)]
    if not early:
        return []
    by_key = {row["key"]: row for row in rows}
    at = {(row["base"], row["step"], row["group"]): row for row in rows if row["done"] and row.get("base")}
    study = list(dict.fromkeys(row["base"] for row in rows if row["group"] == "trajectory"
                               and by_key[row["base"]]["group"] == "probe-time"))
    body, said = [], []
    for row in early:
        step = row["step"]
        read = {base: at.get((base, step, "trajectory")) for base in study}
        for base in study:
            body.append(_early_row(by_key[base]["model"], "the study's run", step, read[base],
                                   at.get((base, step, "geometry"))))
        body.append(_early_row(row["model"], row["what"], step, row if row["done"] else None,
                               at.get((row["key"], step, "geometry"))))
        found = {by_key[base]["model"].startswith("bert"): reading for base, reading in read.items() if reading}
        if row["done"] and len(found) == 2:
            bert, cross = found[True], found[False]
            share = row["effective_rank"] / bert["effective_rank"]
            said.append(f"{row['key']} moves CrossBERT's pooled effective rank at step {step} from "
                        f"{cross['effective_rank']:.1f} to {row['effective_rank']:.1f} (BERT's: "
                        f"{bert['effective_rank']:.1f}; {share:.0%} of it: "
                        f"{'restored' if share >= RESTORED else 'not restored'}), "
                        f"raw GLUE {_delta(row['glue_raw'], cross['glue_raw'])} points")
    intro = ("Variants of CrossBERT's loss trained only to an early probe step, under the whole run's schedule, beside "
             "the study's seed-1 runs read at the same step (all tokens, after the final norm). Token columns: the "
             "token states' effective rank and the shares of their variance explained by the token id, by the "
             "position, and on the first principal direction.")
    return [Paragraph(intro), Table(EARLY_COLUMNS, body), *([Paragraph("; ".join(said) + ".")] if said else []),
            *early_seed_blocks(rows)]


def _early_row(model: str, what: str, step: int, reading: dict | None, geometry: dict | None) -> list:
    pooled = ([reading["glue_raw"], reading["glue_whitened"], reading["effective_rank"], reading["mean_cosine"]]
              if reading else ["not measured yet", None, None, None])
    tokens = ([geometry[name] for name in ("token_effective_rank", "identity_share", "position_share", "pc1_share")]
              if geometry else [None] * 4)
    return [model, what, step, *pooled, *tokens]


def _rank_cosine(row: dict | None) -> str:
    return "—" if row is None or not row["done"] else f"{row['effective_rank']:.1f} / {row['mean_cosine']:.2f}"


def ablations_section(results: dict) -> Section:
    rows = results["rows"]
    cpu = sum(row.get("cpu_s", 0.0) for row in rows)
    done = sum(row["done"] for row in rows)
    blocks = [Paragraph(
        "Each row changes one thing. Probe-time rows read the study's final checkpoints another way (a seeded "
        "random half of each text's tokens visible at their original positions, CrossBERT's training input; "
        "the tensor before the encoder's final norm; a middle layer); decoder rows train CrossBERT "
        "complementary again at the same steps with a weaker reconstruction decoder. GLUE is the frozen "
        "linear probe's average (raw: pooled features as they are; whitened: PCA-whitened); effective rank "
        "(Roy & Vetterli) and mean pairwise cosine (uncentred) are those of the pooled features; the held-out loss is "
        "the run's own at that checkpoint (reconstruction for CrossBERT, MLM for BERT). A visible half "
        "pools half as many tokens, which by itself lowers the mean cosine: BERT's same row is the control."),
        Table(COLUMNS, [_row(row) for row in main_rows(rows, results["seed"])]),
        Paragraph(cause_text(rows)), *early_blocks(rows, results["seed"]), *final_seed_blocks(rows),
        *trajectory_blocks(rows),
        *geometry_blocks(rows),
        Paragraph(f"{done} of {len(rows)} rows measured; {cpu / 3600:.2f} CPU-hours (a trained row includes the "
                  "training its measuring process did: a training resumed across processes counts its last "
                  "segment here, and every segment's wall and CPU time is in `ablations/commands.jsonl`; "
                  f"results.json written {results['written_utc']})."),
        Paragraph(f"Reproduce: `python -m experiments.claims.ablations --plan {results['plan']} --work-dir WORK` "
                  "(WORK: the study's work dir; resumable).")]
    title = Heading(f"CrossBERT's raw-feature collapse: ablations (plan `{results['plan']}`, seed {results['seed']})", 3)
    return Section(SECTION, title, f"written by python -m experiments.claims.ablations --plan {results['plan']}",
                   results["written_utc"], blocks)


def write_ablations_section(page: Path, results: dict) -> Path:
    return publish(page, ablations_section(results))
