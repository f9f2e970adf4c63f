"""Evaluation of frozen encoders: linear probes (``probing/``) and MTEB (``mteb/``), on one encoder path.

Shared by both (here):
- ``encoders.resolve_model(ref)`` / ``encoders.HFEncoder``: native checkpoints go through HF export;
- ``recipe.resolve_recipe(dir)``: a model's own embedding recipe (pooling, L2 norm, max tokens, whitening);
- ``whitening.fit_whitening(features)``: PCA whitening, the frozen-feature default of our checkpoints;
- ``feature_cache.FeatureCache``: pooled features on disk, keyed by model identity and exact texts;
- ``training_hook.probe_in_training(model, run_cfg, tasks, iteration)``: what training calls every N steps.

``probing/``: ``runner.run_probing(model_ref, tasks, ProbeRunConfig)`` (what ``crossbert-probe`` runs),
task loaders (``glue``, ``tasks``), the probes themselves (``linear_probes``), reports, and the live-model
suite (``in_training``). ``mteb/``: ``adapter.run_mteb(...)`` (what ``crossbert-mteb`` runs), offline task
folders, mteb task objects, result files, and the MTEB-lite in-training probe.
Import from the modules; the package imports stay cheap (nothing heavy loads until a module is used).
"""
