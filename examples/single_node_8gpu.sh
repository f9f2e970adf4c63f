#!/usr/bin/env bash
# Usage: examples/single_node_8gpu.sh DATA_PREFIX TOKENIZER_DIR SAVE_DIR [extra crossbert-pretrain args...]
#   One node, 8 GPUs, torchrun standalone rendezvous. CONFIG (default examples/crossbert_base.yaml),
#   NPROC (default 8) and PRECISION (bf16|fp8, default bf16) come from the environment.
#   Rerunning the same command resumes from SAVE_DIR; SIGTERM saves a checkpoint and exits cleanly.
# Example: examples/single_node_8gpu.sh /data/en_text_document /data/tokenizer /ckpt/base --set parallel.tensor_model_parallel_size=2
set -euo pipefail
if [[ $# -lt 3 ]]; then sed -n '2,7p' "$0"; exit 2; fi
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="$1"; TOKENIZER="$2"; SAVE="$3"; shift 3
CONFIG="${CONFIG:-$REPO/examples/crossbert_base.yaml}"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"  # also runs from a checkout that is not installed
export CUDA_DEVICE_MAX_CONNECTIONS=1   # megatron: keeps TP/SP communication ordered with compute
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-8}"
# torchrun gives workers only 30 s between SIGTERM and SIGKILL by default; a checkpoint save
# of a large model needs longer (also settable with torchrun --shutdown-timeout on recent torch).
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT="${TORCH_ELASTIC_SHUTDOWN_TIMEOUT:-600}"

exec torchrun --standalone --nproc_per_node "${NPROC:-8}" --signals-to-handle SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1 \
  -m megatron_crossbert.cli.pretrain \
  --config "$CONFIG" --precision "${PRECISION:-bf16}" \
  --data-path "$DATA" --tokenizer "$TOKENIZER" --save "$SAVE" "$@"
