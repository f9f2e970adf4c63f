"""Reference for the agreement test: fine-tune with nothing but csv + transformers + torch + scipy/sklearn,
written without importing megatron_crossbert, so crossbert-finetune's numbers are checked to the last bit.

Usage: python reference_plain_transformers.py MODEL_DIR GLUE_DIR TASK OUT_JSON [--max-train N] [--epochs E]
       [--lr LR] [--seed S] [--batch-size B] [--max-len L] [--threads T]

Recipe: Cramming's GLUE_sane (AdamW lr 4e-5, betas (0.9, 0.98), eps 1e-6, no weight decay; cosine schedule with
int(0.1 * steps) warmup steps; batch 16; max length 128; no clipping; dev scored after the last epoch), under
transformers.Trainer's RNG conventions (re-seed once the model exists; one global draw per epoch; epoch e's
order from a generator seeded seed + e). --max-train keeps rows sorted(default_rng(0).choice(n, N)).
"""

import argparse
import csv
import hashlib
import json
import math
import sys

import numpy as np
import torch
import transformers
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef
from transformers import AutoModelForSequenceClassification, AutoTokenizer

# directory, header?, text column, pair column, label column, label names or None, regression?
TASKS = {
    "RTE": ("RTE", True, "sentence1", "sentence2", "label", ["entailment", "not_entailment"], False),
    "MRPC": ("MRPC", True, "#1 String", "#2 String", "Quality", None, False),
    "STS-B": ("STS-B", True, "sentence1", "sentence2", "score", None, True),
    "CoLA": ("CoLA", False, 3, None, 1, None, False),
}


def read(path, header, text, pair, label, names, regression):
    csv.field_size_limit(sys.maxsize)
    with open(path, encoding="utf-8-sig", newline="") as handle:
        rows = [row for row in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE) if row]
    if header:
        columns = [c.strip() for c in rows[0]]
        rows = rows[1:]
        text, label = columns.index(text), columns.index(label)
        pair = columns.index(pair) if pair is not None else None
    a = [row[text].strip() for row in rows]
    b = [row[pair].strip() for row in rows] if pair is not None else None
    if regression:
        y = [float(row[label]) for row in rows]
    elif names:
        y = [names.index(row[label].strip()) for row in rows]
    else:
        y = [int(row[label]) for row in rows]
    return a, b, np.array(y)


def scores(task, y, pred):
    if task == "MRPC":
        return {"f1": 100 * f1_score(y, pred), "accuracy": 100 * accuracy_score(y, pred)}
    if task == "STS-B":
        return {"spearman": 100 * spearmanr(y, pred)[0], "pearson": 100 * pearsonr(y, pred)[0]}
    if task == "CoLA":
        return {"matthews": 100 * matthews_corrcoef(y, pred)}
    return {"accuracy": 100 * accuracy_score(y, pred)}


def base_parser():
    """The arguments both references take: model, GLUE folder, task, output file, and the shared options."""
    p = argparse.ArgumentParser()
    for name in ("model", "glue", "task", "out"):
        p.add_argument(name)
    p.add_argument("--max-train", type=int)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int)
    return p


def load_splits(glue, task, max_train=None):
    """Train and dev splits of ``task`` (train subsampled as the tool's ``--max-train`` does), its label names
    and whether it is a regression; shared by both references."""
    d, header, text, pair, label, names, regression = TASKS[task]
    tr = read(f"{glue}/{d}/train.tsv", header, text, pair, label, names, regression)
    dv = read(f"{glue}/{d}/dev.tsv", header, text, pair, label, names, regression)
    if max_train and max_train < len(tr[0]):
        keep = np.sort(np.random.default_rng(0).choice(len(tr[0]), size=max_train, replace=False))
        tr = ([tr[0][i] for i in keep], None if tr[1] is None else [tr[1][i] for i in keep], tr[2][keep])
    return tr, dv, names, regression


def main():
    p = base_parser()
    p.add_argument("--lr", type=float, default=4e-5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-len", type=int, default=128)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tr, dv, names, regression = load_splits(args.glue, args.task, args.max_train)

    tok = AutoTokenizer.from_pretrained(args.model)
    enc_tr = tok(tr[0], tr[1], truncation=True, max_length=args.max_len)
    enc_dv = tok(dv[0], dv[1], truncation=True, max_length=args.max_len)

    def rows(enc, idx):
        return [{k: enc[k][i] for k in enc.keys()} for i in idx]

    transformers.logging.set_verbosity_error()
    n_labels = 1 if regression else (len(names) if names else int(max(tr[2].max(), dv[2].max())) + 1)
    torch.manual_seed(args.seed)  # the classifier head is drawn from here
    model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=n_labels)
    torch.manual_seed(args.seed)  # Trainer's set_seed once the model exists
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.0)
    n = len(tr[0])
    total = math.ceil(n / args.batch_size) * args.epochs
    sched = transformers.get_cosine_schedule_with_warmup(opt, int(0.1 * total), total)
    model.train()
    for epoch in range(args.epochs):
        torch.empty((), dtype=torch.int64).random_()  # a DataLoader iterator's base-seed draw
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(args.seed + epoch)).tolist()
        for s in range(0, n, args.batch_size):
            idx = perm[s:s + args.batch_size]
            batch = dict(tok.pad(rows(enc_tr, idx), padding=True, return_tensors="pt"))
            batch["labels"] = torch.tensor(tr[2][idx], dtype=torch.float32 if regression else torch.long)
            model(**batch).loss.backward()
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
    model.eval()
    logits = []
    with torch.no_grad():
        for s in range(0, len(dv[0]), 64):
            batch = dict(tok.pad(rows(enc_dv, range(s, min(s + 64, len(dv[0])))), padding=True, return_tensors="pt"))
            logits.append(model(**batch).logits.float().numpy())
    logits = np.concatenate(logits)
    pred = logits[:, 0] if regression else logits.argmax(-1)
    with open(args.out, "w") as handle:
        json.dump({"metrics": {k: float(v) for k, v in scores(args.task, dv[2], pred).items()},
                   "predictions": pred.tolist(), "threads": torch.get_num_threads(),
                   "logits_sha256": hashlib.sha256(np.ascontiguousarray(logits, np.float32).tobytes()).hexdigest()},
                  handle)


if __name__ == "__main__":
    main()
