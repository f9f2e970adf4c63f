"""Second reference: the same fine-tune through ``transformers.Trainer`` (needs accelerate, which the eval
extra's ``sentence-transformers[train]`` brings), so the tool's plain loop is checked against the Trainer too.

Usage: python reference_trainer.py MODEL_DIR GLUE_DIR TASK OUT_JSON [--max-train N] [--epochs E] [--seed S]
       [--threads T]

Trainer settings that express Cramming's recipe: optim adamw_torch (not the fused default), adam_beta2 0.98,
adam_epsilon 1e-6, weight_decay 0, max_grad_norm 0 (no clipping), cosine schedule with warmup_steps =
int(0.1 * steps) given as an integer (the Trainer's own warmup_ratio rounds up), batch 16, padding per batch,
eval batch 64 in file order. The Trainer writes nothing: its output_dir is a folder beside OUT_JSON.
"""

import hashlib
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer,
                          TrainingArguments)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference_plain_transformers import base_parser, load_splits  # noqa: E402  (the same independent TSV reading)


def main():
    args = base_parser().parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tr, dv, names, regression = load_splits(args.glue, args.task, args.max_train)
    tok = AutoTokenizer.from_pretrained(args.model)

    def dataset(split, with_labels):
        enc = tok(split[0], split[1], truncation=True, max_length=128)
        rows = [{k: enc[k][i] for k in enc.keys()} for i in range(len(split[0]))]
        if with_labels:
            for row, y in zip(rows, split[2].tolist()):
                row["labels"] = float(y) if regression else int(y)
        return rows

    train, dev = dataset(tr, True), dataset(dv, False)
    transformers.logging.set_verbosity_error()
    n_labels = 1 if regression else (len(names) if names else int(max(tr[2].max(), dv[2].max())) + 1)
    torch.manual_seed(args.seed)
    model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=n_labels)
    total = math.ceil(len(train) / 16) * args.epochs
    targs = TrainingArguments(
        output_dir=str(Path(args.out).parent / "trainer_output"), per_device_train_batch_size=16,
        per_device_eval_batch_size=64, num_train_epochs=args.epochs, learning_rate=4e-5, lr_scheduler_type="cosine",
        warmup_steps=int(0.1 * total), weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.98, adam_epsilon=1e-6,
        max_grad_norm=0.0, optim="adamw_torch", seed=args.seed, use_cpu=True, report_to=[], save_strategy="no",
        eval_strategy="no", logging_strategy="no", dataloader_num_workers=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=targs, train_dataset=train, data_collator=DataCollatorWithPadding(tok))
    trainer.train()
    logits = trainer.predict(dev).predictions.astype(np.float32)
    pred = logits[:, 0] if regression else logits.argmax(-1)
    with open(args.out, "w") as handle:
        json.dump({"predictions": pred.tolist(), "threads": torch.get_num_threads(),
                   "logits_sha256": hashlib.sha256(np.ascontiguousarray(logits).tobytes()).hexdigest()}, handle)


if __name__ == "__main__":
    main()
