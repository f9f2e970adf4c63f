#!/bin/bash
# Usage: examples/preprocess_slurm.sh 'CORPUS/*.jsonl.gz' TOKENIZER_DIR OUT_DIR [TASKS=64] [PARTITION=cpu] [CPUS=8]
# (run on a login node, in the venv, on a filesystem every node sees). Submits crossbert-preprocess as a SLURM array:
# array task r tokenizes its contiguous share of the input files into OUT_DIR/shards/<r:05d>_text_document.bin/.idx,
# exactly as one crossbert-preprocess run would; then a job that waits for the array merges the shards into
# OUT_DIR/corpus_text_document.bin/.idx (byte-identical to one run) and writes OUT_DIR/corpus.blend.json (a --data-path
# that trains on the shards as on their merge). Rerunning the script resubmits only the tasks that did not finish.
set -euo pipefail
INPUT=$1; TOKENIZER=$2; OUT=$3; TASKS=${4:-64}; PARTITION=${5:-cpu}; CPUS=${6:-8}
VENV=${VIRTUAL_ENV:?activate the project venv first}

submitted=$(crossbert-preprocess-datatrove --input "$INPUT" --tokenizer "$TOKENIZER" --append-eod \
    --output-dir "$OUT/shards" --logging-dir "$OUT/logs" --tasks "$TASKS" --workers "$CPUS" \
    --executor slurm --partition "$PARTITION" --cpus-per-task "$CPUS" --mem-per-cpu-gb 2 --time 12:00:00 \
    --env-command "source $VENV/bin/activate")
echo "$submitted"
job=$(awk '/^slurm job:/ {print $3}' <<<"$submitted")
dependency=$([ "$job" = "-1" ] && echo "" || echo "--dependency=afterok:$job")  # -1: every task had finished
sbatch $dependency --partition "$PARTITION" --cpus-per-task 1 --time 2:00:00 --job-name crossbert_merge \
    --wrap "source $VENV/bin/activate && crossbert-merge --input $OUT/shards --output-prefix $OUT/corpus_text_document \
            --blend-file $OUT/corpus.blend.json --no-progress"
