#!/usr/bin/env bash
# Usage (run on EVERY node, same arguments):
#   NNODES=4 NODE_RANK=<0..3> MASTER_ADDR=<node0 host> examples/multi_node.sh DATA_PREFIX TOKENIZER_DIR SAVE_DIR [args...]
#   torchrun with a c10d rendezvous at MASTER_ADDR:MASTER_PORT (default 29500); GPUS_PER_NODE (8),
#   CONFIG (examples/crossbert_base.yaml), RDZV_ID (job id) and TORCHRUN (torchrun) from the environment.
#   SAVE_DIR must be on a filesystem every node sees (dist_checkpointing writes one shard file per rank).
#   On one machine (tests/examples/test_multi_node.py): two agents, MASTER_ADDR=127.0.0.1, GPUS_PER_NODE=1, on gloo.
set -euo pipefail
if [[ $# -lt 3 || -z "${NNODES:-}" || -z "${NODE_RANK:-}" || -z "${MASTER_ADDR:-}" ]]; then sed -n '2,7p' "$0"; exit 2; fi
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="$1"; TOKENIZER="$2"; SAVE="$3"; shift 3
CONFIG="${CONFIG:-$REPO/examples/crossbert_base.yaml}"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"  # also runs from a checkout that is not installed
export CUDA_DEVICE_MAX_CONNECTIONS=1
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-8}"
# torchrun gives workers only 30 s between SIGTERM and SIGKILL by default; a checkpoint save
# of a large model needs longer (also settable with torchrun --shutdown-timeout on recent torch).
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT="${TORCH_ELASTIC_SHUTDOWN_TIMEOUT:-600}"
# SIGUSR1 too (SLURM's --signal=USR1@N): torchrun forwards only what it handles, and dies of the rest.

exec "${TORCHRUN:-torchrun}" --nnodes "$NNODES" --node_rank "$NODE_RANK" --nproc_per_node "${GPUS_PER_NODE:-8}" \
  --signals-to-handle SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1 \
  --rdzv_backend c10d --rdzv_endpoint "$MASTER_ADDR:${MASTER_PORT:-29500}" --rdzv_id "${RDZV_ID:-crossbert}" \
  -m megatron_crossbert.cli.pretrain --config "$CONFIG" \
  --data-path "$DATA" --tokenizer "$TOKENIZER" --save "$SAVE" "$@"
