"""Evaluation: frozen linear probes (GLUE TSVs, JSONL, HF datasets) and the MTEB adapter.

Public entry points (import from the submodules; this package import stays cheap):
- ``probing.run_probing(model_ref, tasks, ProbeRunConfig)`` and ``probing.collect_tasks(...)``
- ``suite.run_probe_suite(embed_fn, tasks)``: in-training probes on the live model
- ``glue.load_glue_task(glue_dir, name)``, ``tasks.load_jsonl_task(dir)``
- ``encoders.resolve_model(ref)`` / ``encoders.HFEncoder``: native checkpoints go through HF export
- ``mteb_adapter.run_mteb(...)``: MTEB online benchmarks or offline local tasks
"""

