"""Evaluation of encoders: frozen probes (linear and k-NN), fine-tuning, MTEB and a pooler on a frozen backbone.

Peers, each with its own CLI, on what they share:

- ``tasks/``: the task data (the ``ProbeTask`` model, JSONL and GLUE readers, gold-label rules, metrics);
- ``embedder.py``: ``Embedder``, one idea of an embedding model (the model, its recipe, a trained pooler, the
  feature cache and the identity, resolved once; ``embedder.json``), what every evaluation takes;
- ``encoders.py``: ``resolve_model(ref)`` / ``HFEncoder`` (native checkpoints are verified and exported first);
- ``recipe.py``: a model's own embedding recipe (pooling, L2 norm, max tokens, whitening);
- ``whitening.py``: PCA whitening, the frozen-feature default of our checkpoints;
- ``feature_cache.py``: pooled features on disk, keyed by model identity and exact texts;
- ``dense_head.py``: a saved pooler's ``Dense`` and ``Normalize`` over cached features; ``attention_pooling.py``:
  its ``AttentionPooling`` module.

``probing/`` (``crossbert-probe``: frozen linear and k-NN probes), ``finetune/`` (``crossbert-finetune``: the
peers' GLUE fine-tuning protocols), ``mteb/`` (``crossbert-mteb``: mteb on local folders or online) and
``pooler/`` (``crossbert-pooler``: the paper's MTEB "(frozen)" protocol) import from the shared modules above,
never from one another (the pooler is scored by the scorer its CLI gives it, MTEB's). ``in_training.py``:
``probe_in_training(model, run_cfg, tasks, iteration)``, the in-training probes the pretrain CLI hands to
training. Import from the modules; the package imports stay cheap (nothing heavy loads until a module is used).
"""
