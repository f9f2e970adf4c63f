#!/bin/bash
# Usage: examples/preprocess_ray.sh 'CORPUS/*.jsonl.gz' TOKENIZER_DIR OUT_DIR [TASKS=64] [CPUS_PER_TASK=8] [RAY_ADDRESS=auto]
# (on a node of a running Ray cluster, `ray start --head` / `ray start --address=...`, with the `ray` extra in the
# venv and a filesystem every node sees; RAY_ADDRESS=local starts a cluster on this machine). Runs crossbert-preprocess
# as TASKS Ray tasks, task r on its contiguous share of the input files, then merges them into
# OUT_DIR/corpus_text_document.bin/.idx (byte-identical to one crossbert-preprocess run) and writes OUT_DIR/corpus.blend.json.
set -euo pipefail
INPUT=$1; TOKENIZER=$2; OUT=$3; TASKS=${4:-64}; CPUS=${5:-8}; ADDRESS=${6:-auto}
[ "$ADDRESS" = "local" ] && ADDRESS_FLAG=() || ADDRESS_FLAG=(--ray-address "$ADDRESS")

crossbert-preprocess-datatrove --input "$INPUT" --tokenizer "$TOKENIZER" --append-eod \
    --output-dir "$OUT/shards" --logging-dir "$OUT/logs" --tasks "$TASKS" --workers "$CPUS" \
    --executor ray --cpus-per-task "$CPUS" --mem-per-cpu-gb 2 "${ADDRESS_FLAG[@]}"
crossbert-merge --input "$OUT/shards" --output-prefix "$OUT/corpus_text_document" --blend-file "$OUT/corpus.blend.json"
