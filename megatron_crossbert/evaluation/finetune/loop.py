"""One fine-tuning run (task, learning rate, seed): a plain PyTorch loop over a transformers classifier.

Why a plain loop and not ``transformers.Trainer``: the Trainer needs ``accelerate``, wraps the data in
accelerate's seedable sampler, groups parameters and clips gradients by default; each is one more thing a
reference has to copy to agree to the last bit. This loop is the shortest code that runs the peers'
recipes, and the agreement test re-implements it with nothing but ``transformers`` and ``torch``.

What must be identical for two implementations to agree bit for bit on the CPU:

1. ``torch.manual_seed(seed)`` right before ``AutoModelForSequenceClassification.from_pretrained``:
   the new classifier head (and any weight the checkpoint lacks) is drawn from the global RNG.
2. ``transformers.Trainer``'s RNG conventions, so a Trainer reference agrees too: (a) ``manual_seed(seed)``
   again once the model exists (``Trainer.__init__``'s ``set_seed``); (b) at each epoch start one draw from
   the global RNG (the base seed a ``DataLoader`` iterator takes, even without workers); (c) epoch e's order
   is ``randperm(n)`` from a generator seeded ``seed + e`` (accelerate's ``SeedableRandomSampler``).
3. Dropout is the only other consumer of the global RNG; nothing else may draw between steps.
4. The same batches and padding: tokenised once unpadded (``truncation=True, max_length``), each batch padded
   to its longest row; dev scored in file order in batches of ``eval_batch_size`` (padding changes matmul
   shapes, and so the last bits).
5. The same optimiser and schedule: ``torch.optim.AdamW`` (single-tensor path; a Trainer reference passes
   ``optim="adamw_torch"``), ``transformers.get_{cosine,linear}_schedule_with_warmup`` with
   ``int(ratio * steps)`` warmup steps, no clipping unless the preset asks (the Trainer clips at 1.0).
6. The same torch thread count (recorded in every result).
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from megatron_crossbert.evaluation.tasks.glue import GLUE_FORMATS
from megatron_crossbert.evaluation.tasks.metrics import compute_metrics, task_score
from megatron_crossbert.evaluation.tasks.data import ProbeTask, Split


@dataclass(frozen=True)
class RunSpec:
    """Everything that decides one run's numbers; its JSON is the resume key."""

    task: str
    """Canonical GLUE task name."""
    lr: float
    """Peak learning rate."""
    seed: int
    """Seed of the head's init, dropout and the data order."""
    epochs: int
    """Passes over the train split."""
    batch_size: int
    """Train batch size."""
    max_len: int
    """Max tokens per (paired) input."""
    schedule: str
    """``cosine``, ``linear`` or ``constant`` after warmup."""
    warmup_ratio: float
    """Warmup steps as ``int(warmup_ratio * total steps)``."""
    betas: tuple[float, float]
    """AdamW betas."""
    eps: float
    """AdamW epsilon."""
    weight_decay: float
    """torch AdamW's weight decay."""
    decay_all_params: bool
    """Decay every parameter (Composer's DecoupledAdamW); else matrices only (no biases, no norms)."""
    grad_clip: float | None
    """Gradient-norm clip; None: none."""
    max_train: int | None = None
    """Seeded subsample of the train split (smoke runs); None: all of it."""
    max_dev: int | None = None
    """Seeded subsample of the dev split (not comparable numbers); None: all of it."""
    eval_batch_size: int = 64
    """Dev batch size (changes padding, so it is part of the key)."""
    subsample_seed: int = 0
    """Seed of the ``max_train``/``max_dev`` subsamples."""


@dataclass
class RunResult:
    """One finished run: its dev metrics and what it cost."""

    spec: RunSpec
    metrics: dict[str, float]
    """GLUE metrics on dev, 0-100."""
    score: float
    """The task score: mean of its GLUE metrics."""
    n_train: int
    n_dev: int
    steps: int
    wall_s: float
    cpu_s: float
    """CPU seconds of this process for load, training and dev scoring."""
    device: str
    """Where it ran; CPU and CUDA numbers are not bit-comparable."""
    threads: int
    """torch CPU threads (bit agreement holds only at equal counts)."""
    final_loss: float
    predictions: list
    """Dev predictions in dev-file order (class ids, or the regression output)."""
    logits_sha256: str
    """sha256 of the float32 dev logits: equal hashes mean bit-identical outputs."""

    def to_json(self) -> dict:
        return {**asdict(self), "spec": asdict(self.spec)}


def encode(tokenizer, split: Split, max_len: int) -> list[dict]:
    """Token ids per row, unpadded; pairs go through the tokenizer's pair encoding (longest first)."""
    enc = tokenizer(split.texts, split.pairs, truncation=True, max_length=max_len)
    keys = [key for key in ("input_ids", "token_type_ids", "attention_mask") if key in enc]
    return [{key: enc[key][i] for key in keys} for i in range(len(split))]


def collate(tokenizer, rows: list[dict], labels: np.ndarray | None, regression: bool) -> dict:
    """Pad a batch to its longest row; add float (regression) or long (classification) labels."""
    batch = dict(tokenizer.pad(rows, padding=True, return_tensors="pt"))
    if labels is not None:
        batch["labels"] = torch.tensor(labels, dtype=torch.float32 if regression else torch.long)
    return batch


def param_groups(model: torch.nn.Module, weight_decay: float, decay_all: bool) -> list[dict]:
    """Decay on every parameter, or on matrices only (not biases or norms, as BERT and Cramming do)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            matrix = param.ndim >= 2 and "norm" not in name.lower()
            (decay if decay_all or matrix else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_scheduler(optimizer, schedule: str, warmup_ratio: float, total_steps: int):
    """transformers' warmup schedules with ``int(warmup_ratio * total_steps)`` warmup steps."""
    import transformers

    warmup = int(warmup_ratio * total_steps)
    if schedule == "cosine":
        return transformers.get_cosine_schedule_with_warmup(optimizer, warmup, total_steps)
    if schedule == "linear":
        return transformers.get_linear_schedule_with_warmup(optimizer, warmup, total_steps)
    if schedule == "constant":
        return transformers.get_constant_schedule_with_warmup(optimizer, warmup)
    raise ValueError(f"schedule: unknown schedule {schedule!r} (cosine, linear or constant)")


def load_classifier(hf_path: str, num_labels: int, seed: int, device: torch.device):
    """Seed, then build the classifier: its new head is the first draw from the global RNG."""
    import transformers
    from transformers import AutoModelForSequenceClassification

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # "newly initialized: classifier.*" is expected
    try:
        torch.manual_seed(seed)
        model = AutoModelForSequenceClassification.from_pretrained(hf_path, num_labels=num_labels)
    finally:
        transformers.logging.set_verbosity(verbosity)
    return model.to(device)


@torch.no_grad()
def predict_logits(model, tokenizer, rows: list[dict], batch_size: int, device: torch.device) -> np.ndarray:
    """Dev logits in file order, float32."""
    model.eval()
    chunks = []
    for start in range(0, len(rows), batch_size):
        batch = collate(tokenizer, rows[start:start + batch_size], None, False)
        chunks.append(model(**{k: v.to(device) for k, v in batch.items()}).logits.float().cpu().numpy())
    return np.concatenate(chunks) if chunks else np.zeros((0, model.config.num_labels), np.float32)


def num_labels_of(task: ProbeTask) -> int:
    """1 for regression (STS-B: the model's MSE head); else the task's known class count (``GlueFormat``),
    never the labels seen: a split lacking a class keeps the head's size."""
    fmt = GLUE_FORMATS[task.spec.name]
    return 1 if fmt.kind == "regression" else len(fmt.label_names)


def train_epochs(model, tokenizer, rows: list[dict], labels: np.ndarray, spec: RunSpec, device: torch.device,
                 progress=None) -> tuple[int, float]:
    """The training loop under the RNG conventions in the module docstring; returns (steps, last loss)."""
    torch.manual_seed(spec.seed)  # (a) Trainer.__init__'s set_seed: dropout starts from the seed
    optimizer = torch.optim.AdamW(param_groups(model, spec.weight_decay, spec.decay_all_params), lr=spec.lr,
                                  betas=tuple(spec.betas), eps=spec.eps)
    total = math.ceil(len(rows) / spec.batch_size) * spec.epochs
    scheduler = make_scheduler(optimizer, spec.schedule, spec.warmup_ratio, total)
    regression = GLUE_FORMATS[spec.task].kind == "regression"
    loss = torch.tensor(float("nan"))
    model.train()
    for epoch in range(spec.epochs):
        torch.empty((), dtype=torch.int64).random_()  # (b) a DataLoader iterator's base-seed draw
        order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(spec.seed + epoch)).tolist()
        for start in range(0, len(order), spec.batch_size):
            idx = order[start:start + spec.batch_size]
            batch = collate(tokenizer, [rows[i] for i in idx], labels[idx], regression)
            loss = model(**{k: v.to(device) for k, v in batch.items()}).loss
            loss.backward()
            if spec.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), spec.grad_clip)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            if progress is not None:
                progress.update(1)
    return total, float(loss.detach())


def run_one(hf_path: str, task: ProbeTask, spec: RunSpec, *, tokenizer=None, device: str | None = None,
            progress=None) -> RunResult:
    """Fine-tune a fresh copy of the model on ``task.train`` and score it on ``task.test`` (GLUE dev)."""
    from transformers import AutoTokenizer

    fmt = GLUE_FORMATS[spec.task]
    target = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tokenizer = tokenizer or AutoTokenizer.from_pretrained(hf_path)
    task = task.subsample(spec.max_train, spec.max_dev, spec.subsample_seed)
    train_rows, dev_rows = encode(tokenizer, task.train, spec.max_len), encode(tokenizer, task.test, spec.max_len)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    model = load_classifier(hf_path, num_labels_of(task), spec.seed, target)
    steps, loss = train_epochs(model, tokenizer, train_rows, task.train.labels, spec, target, progress)
    logits = predict_logits(model, tokenizer, dev_rows, spec.eval_batch_size, target)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    preds = logits[:, 0] if fmt.kind == "regression" else logits.argmax(-1)
    metrics = compute_metrics(fmt.metrics, task.test.labels, preds)
    return RunResult(spec=spec, metrics=metrics, score=task_score(metrics, fmt.metrics), n_train=len(train_rows),
                     n_dev=len(dev_rows), steps=steps, wall_s=wall, cpu_s=cpu, device=str(target),
                     threads=torch.get_num_threads(),
                     final_loss=loss, predictions=preds.tolist(),
                     logits_sha256=hashlib.sha256(np.ascontiguousarray(logits, np.float32).tobytes()).hexdigest())
