#!/usr/bin/env bash
# Usage: examples/train_tiny_cpu.sh [WORKDIR]   (default: crossbert_tiny in $TMPDIR, else in /tmp)
#   End to end on the CPU: generate a small corpus (the demo's docstring corpus, no network),
#   train a 1024-token WordPiece tokenizer, preprocess to Megatron indexed datasets, then pretrain
#   examples/tiny_cpu.yaml with torchrun on gloo. Data steps are skipped when their outputs exist.
# Environment (all optional):
#   NPROC=2 TP=1 PP=1      processes and parallel layout (DP = NPROC / (TP*PP))
#   ARCH=crossbert|bert    architecture       TRAIN_ITERS=40   optimizer steps
#   CORPUS_BYTES=2000000   corpus size        PYTHON / TORCHRUN  interpreters (default: repo .venv if present)
#   EXTRA_ARGS="..."       extra crossbert-pretrain arguments, e.g. "--set training.log_interval=1"
# Example: TP=2 examples/train_tiny_cpu.sh runs/tiny_tp2
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${1:-${TMPDIR:-/tmp}/crossbert_tiny}"
NPROC="${NPROC:-2}"; TP="${TP:-1}"; PP="${PP:-1}"
ARCH="${ARCH:-crossbert}"; TRAIN_ITERS="${TRAIN_ITERS:-40}"; CORPUS_BYTES="${CORPUS_BYTES:-2000000}"
if [[ -x "$REPO/.venv/bin/python" ]]; then DEFAULT_BIN="$REPO/.venv/bin/"; else DEFAULT_BIN=""; fi
PYTHON="${PYTHON:-${DEFAULT_BIN}python}"
TORCHRUN="${TORCHRUN:-${DEFAULT_BIN}torchrun}"
mkdir -p "$WORK"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"

if [[ ! -f "$WORK/corpus.jsonl" ]]; then
  echo "== corpus: $WORK/corpus.jsonl"
  "$PYTHON" -c "import sys; from crossbert_demo.corpus import write_corpus; \
write_corpus(sys.argv[1], max_bytes=int(sys.argv[2]))" "$WORK/corpus.jsonl" "$CORPUS_BYTES"
fi
if [[ ! -d "$WORK/tokenizer" ]]; then
  echo "== tokenizer: $WORK/tokenizer"
  "$PYTHON" -m megatron_crossbert.cli.train_tokenizer --input "$WORK/corpus.jsonl" --output-dir "$WORK/tokenizer" \
    --model wordpiece --vocab-size 1024
fi
if [[ ! -f "$WORK/corpus_text_document.idx" ]]; then
  echo "== preprocess: $WORK/corpus_text_document.{bin,idx}"
  "$PYTHON" "$REPO/tools/preprocess_data.py" --input "$WORK/corpus.jsonl" --output-prefix "$WORK/corpus" \
    --tokenizer "$WORK/tokenizer" --append-eod --no-progress
fi

SAVE="$WORK/ckpt_${ARCH}_tp${TP}_pp${PP}_n${NPROC}"
echo "== pretrain: $NPROC processes, TP=$TP PP=$PP, checkpoints in $SAVE"
# shellcheck disable=SC2086  # EXTRA_ARGS is intentionally word-split
"$TORCHRUN" --standalone --nproc_per_node "$NPROC" -m megatron_crossbert.cli.pretrain \
  --config "$REPO/examples/tiny_cpu.yaml" --model "$ARCH" --train-iters "$TRAIN_ITERS" \
  --data-path "$WORK/corpus_text_document" --tokenizer "$WORK/tokenizer" --save "$SAVE" \
  --tensor-parallel "$TP" --pipeline-parallel "$PP" ${EXTRA_ARGS:-}
