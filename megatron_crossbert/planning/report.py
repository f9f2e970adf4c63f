"""The plan of one run on one cluster, as a dict (``--json``) and as the text table ``crossbert-plan`` prints.

The dict is built once (``build_plan``) and the text is rendered from it, so the two never disagree.
"""

from __future__ import annotations

import dataclasses

from megatron_crossbert.arch import get_arch
from megatron_crossbert.models.flops import model_flops_per_sample
from megatron_crossbert.planning.layouts import (ASSUMED_MFU, LAYER_OVERHEAD_SECONDS, USABLE_FRACTION, Layout,
                                                 LayoutPlan, Planner, largest_micro_batch, rank_layouts)
from megatron_crossbert.planning.megatron_formula import megatron_lm_estimate
from megatron_crossbert.planning.parameters import stage_params, state_bytes, total_params

GIB = 2 ** 30
SHOWN_LAYOUTS = 8
"""Ranked layouts the table prints (the JSON keeps them all)."""


def config_layout(planner: Planner) -> Layout:
    """The layout the config asks for, with DP filling the cluster."""
    cfg = planner.run_cfg
    tp, pp = cfg.parallel.tensor_model_parallel_size, cfg.parallel.pipeline_model_parallel_size
    return Layout(tp, pp, max(1, planner.cluster.world_size // (tp * pp)), cfg.training.micro_batch_size,
                  cfg.parallel.recompute_activations)


def _layout_row(plan: LayoutPlan, tokens: float) -> dict:
    return {**dataclasses.asdict(plan.layout), "peak_gib": plan.peak_bytes / GIB,
            "stage_peak_gib": [b / GIB for b in plan.stage_peak_bytes], "num_microbatches": plan.num_microbatches,
            "step_seconds": plan.step_seconds, "tokens_per_second": plan.tokens_per_second, "mfu": plan.mfu,
            "days_to_token_budget": tokens / plan.tokens_per_second / 86400, "fits": plan.fits}


def _memory(planner: Planner, plan: LayoutPlan) -> dict:
    """Per stage: weights, gradients, optimizer with and without the distributed optimizer, activations."""
    cfg, layout = plan.run_cfg, plan.layout
    stages = []
    for stage in range(layout.pp):
        without = state_bytes(dataclasses.replace(cfg, parallel=dataclasses.replace(
            cfg.parallel, use_distributed_optimizer=False)), stage, layout.dp)
        with_dist = state_bytes(dataclasses.replace(cfg, parallel=dataclasses.replace(
            cfg.parallel, use_distributed_optimizer=True)), stage, layout.dp)
        used = plan.states[stage]
        stages.append({"stage": stage, "parameters": used.parameters, "weights_bytes": used.weights,
                       "gradients_bytes": used.gradients, "optimizer_bytes": used.optimizer,
                       "optimizer_bytes_without_distributed_optimizer": without.optimizer,
                       "optimizer_bytes_with_distributed_optimizer": with_dist.optimizer,
                       "in_flight_microbatches": min(layout.pp - stage, plan.num_microbatches),
                       "activation_bytes": plan.stage_activation_bytes[stage],
                       "peak_bytes": plan.stage_peak_bytes[stage]})
    return {"stages": stages, "usable_bytes": int(USABLE_FRACTION * planner.cluster.gpu.memory_gib * GIB)}


def _activations(plan: LayoutPlan, other: LayoutPlan) -> dict:
    """One micro-batch by part, per stage, and stage 0's activations without and with full recompute
    (``other``: the same layout with recompute flipped)."""
    layers = plan.run_cfg.model.num_layers // plan.layout.pp
    without, full = (other, plan) if plan.layout.recompute else (plan, other)
    return {"micro_batch": {**dataclasses.asdict(plan.activations), "encoder_layers_on_stage": layers,
                            "per_stage_bytes": [plan.activations.stage_bytes(s, plan.layout.pp, layers)
                                                for s in range(plan.layout.pp)]},
            "recompute_options": {"none": without.stage_activation_bytes[0], "full": full.stage_activation_bytes[0]}}


def build_plan(planner: Planner, tokens: float, mfu_source: str) -> dict:
    """Everything ``crossbert-plan`` reports, JSON-ready."""
    cfg, cluster = planner.run_cfg, planner.cluster
    layout = config_layout(planner)
    reason = planner.why_not(layout)
    if reason and not reason.startswith("global batch"):  # a batch that does not divide is priced as the nearest
        raise ValueError(f"the configured layout {layout.describe()} cannot run: {reason}")
    plan = planner.price(layout)
    other = planner.price(dataclasses.replace(layout, recompute=not layout.recompute))
    fitting, refusals = rank_layouts(planner)
    gbs, seq = cfg.training.global_batch_size, cfg.data.seq_length
    per_sample = model_flops_per_sample(plan.run_cfg)
    megatron = megatron_lm_estimate(plan.run_cfg, layout.dp, plan.num_microbatches)
    return {
        "config": {"arch": cfg.model.arch, "encoder": cfg.model.encoder, "seq_length": seq, "global_batch_size": gbs,
                   "views": cfg.masking.num_views if get_arch(cfg.model.arch).uses_views else 1},
        "cluster": {"gpu": cluster.gpu.name, "gpus_per_node": cluster.gpus_per_node, "nodes": cluster.nodes,
                    "gpu_memory_gib": cluster.gpu.memory_gib, "peak_tflops": cluster.gpu.peak_tflops,
                    "cuda": cluster.gpu.cuda},
        "assumptions": {"mfu": planner.mfu, "mfu_source": mfu_source, "usable_memory_fraction": USABLE_FRACTION,
                        "layer_overhead_seconds": LAYER_OVERHEAD_SECONDS, "attention": plan.run_cfg.model.attention_backend,
                        "sequence_parallel_when_tp_gt_1": True},
        "parameters": {"total": total_params(cfg),
                       "per_rank_by_stage": [stage_params(plan.run_cfg, s) for s in range(layout.pp)]},
        "layout": _layout_row(plan, tokens),
        "memory": _memory(planner, plan),
        "activations": _activations(plan, other),
        "flops": {"per_sample": per_sample, "per_step": per_sample * gbs},
        "time": {"step_seconds": plan.step_seconds, "tokens_per_second": plan.tokens_per_second,
                 "token_budget": tokens, "days_to_token_budget": tokens / plan.tokens_per_second / 86400},
        "largest_micro_batch": {"no_recompute": largest_micro_batch(planner, layout.tp, layout.pp, False),
                                "recompute": largest_micro_batch(planner, layout.tp, layout.pp, True)},
        "layouts": [_layout_row(p, tokens) for p in fitting],
        "refused": [{**dataclasses.asdict(r.layout), "reason": r.reason} for r in refusals],
        "megatron_lm": {"weight_and_optimizer_bytes": megatron.weight_and_optimizer_bytes,
                        "activation_bytes": megatron.activation_bytes, "total_bytes": megatron.total_bytes},
    }


def _gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


def _describe(row: dict) -> str:
    return Layout(row["tp"], row["pp"], row["dp"], row["micro_batch_size"], row["recompute"]).describe()


def render_text(plan: dict) -> str:
    """The plan as the table ``crossbert-plan`` prints."""
    c, cl, a = plan["config"], plan["cluster"], plan["assumptions"]
    lines = [f"plan: {c['arch']} ({c['encoder']}), L={c['seq_length']}, views={c['views']}, global batch "
             f"{c['global_batch_size']} on {cl['nodes']} x {cl['gpus_per_node']} {cl['gpu']} "
             f"({cl['gpu_memory_gib']:.0f} GiB, {cl['peak_tflops']:.3g} TFLOP/s "
             f"{'bf16' if cl['cuda'] else 'fp32 nominal'})",
             f"assumed: MFU {a['mfu']:.2f} ({a['mfu_source']}), a plan may fill {a['usable_memory_fraction']:.0%} "
             "of memory; these are predictions until a GPU run confirms them",
             f"parameters: {plan['parameters']['total']:,} in all; per rank by stage "
             + ", ".join(f"{n:,}" for n in plan["parameters"]["per_rank_by_stage"]),
             f"layout from the config: {_describe(plan['layout'])}"]
    lines += _memory_lines(plan)
    t = plan["time"]
    lines += [f"FLOPs: {plan['flops']['per_sample'] / 1e9:.1f} GFLOP per sample, "
              f"{plan['flops']['per_step'] / 1e15:.2f} PFLOP per step",
              f"time: {t['step_seconds']:.3f} s per step, {t['tokens_per_second']:,.0f} tokens/s, "
              f"{t['days_to_token_budget']:.1f} days to {t['token_budget']:.3g} tokens",
              f"largest micro-batch that fits at TP{plan['layout']['tp']} PP{plan['layout']['pp']}: "
              f"{plan['largest_micro_batch']['no_recompute']} ({plan['largest_micro_batch']['recompute']} with "
              "full recompute)", "", "layouts by predicted throughput (fitting):"]
    lines += [f"  {i + 1}. {_describe(r):34s} {r['peak_gib']:7.2f} GiB  {r['tokens_per_second']:>12,.0f} tok/s  "
              f"MFU {r['mfu']:.2f}  {r['days_to_token_budget']:6.1f} days" for i, r in
              enumerate(plan["layouts"][:SHOWN_LAYOUTS])]
    lines += ["", "refused:"] + [f"  {_describe(r):34s} {r['reason']}" for r in plan["refused"]]
    m = plan["megatron_lm"]
    lines += ["", f"Megatron-LM's formula at this shape: {_gib(m['total_bytes'])} "
                  f"(weights+optimizer {_gib(m['weight_and_optimizer_bytes'])}, activations "
                  f"{_gib(m['activation_bytes'])})"]
    return "\n".join(lines)


def _memory_lines(plan: dict) -> list[str]:
    lines = ["memory per GPU (stage: weights + gradients + optimizer [with / without distributed optimizer] "
             "+ activations = peak):"]
    for s in plan["memory"]["stages"]:
        lines.append(f"  stage {s['stage']}: {_gib(s['weights_bytes'])} + {_gib(s['gradients_bytes'])} + "
                     f"{_gib(s['optimizer_bytes'])} [{_gib(s['optimizer_bytes_with_distributed_optimizer'])} / "
                     f"{_gib(s['optimizer_bytes_without_distributed_optimizer'])}] + {_gib(s['activation_bytes'])} "
                     f"(in flight: {s['in_flight_microbatches']} micro-batches) = {_gib(s['peak_bytes'])}")
    mb = plan["activations"]["micro_batch"]
    lines.append("  activations of one micro-batch: "
                 f"embedding {_gib(mb['embedding_bytes'])}, encoder {_gib(mb['encoder_layer_bytes'])} x "
                 f"{mb['encoder_layers_on_stage']} layers, decoder {_gib(mb['decoder_bytes'])}, LM head "
                 f"{_gib(mb['lm_head_bytes'])}, logits (predicted rows only) {_gib(mb['logits_bytes'])}")
    rc = plan["activations"]["recompute_options"]
    lines.append(f"  recompute: none {_gib(rc['none'])}, full {_gib(rc['full'])} (stage 0 activations)")
    return lines


__all__ = ["ASSUMED_MFU", "build_plan", "render_text"]
