#!/usr/bin/env bash
# Start this node's part of a multi-node job: one torchrun agent per node, c10d rendezvous.
#
#   launch/multinode.sh NNODES GPUS_PER_NODE MASTER_ADDR RUN_DIR [MASTER_PORT]
#
# Run it on every node (same arguments everywhere). RUN_DIR is prepared once, on a file system
# every node mounts, by:
#   RUN_DIR=$(python -m helpers.launch.multinode prepare --out /shared/runs --tp 8 --pp 2 --nproc 16 ...)
# (--nproc is the world size: NNODES * GPUS_PER_NODE). The seed checkpoint is cached under
# KIT_CACHE_DIR (put it on the shared file system too, or copy it to the same path on every node),
# and checkpoints go to save_dir (default RUN_DIR/checkpoints): keep it shared, so every rank can
# read every shard on resume. Before training, the workers compare the dataset, tokenizer and
# checkpoint files every node sees (size + SHA-256) and stop with the node and file named if
# they differ.
set -euo pipefail
if [[ $# -lt 4 ]]; then
  sed -n '2,15p' "$0"; exit 2
fi
NNODES=$1 GPUS_PER_NODE=$2 MASTER_ADDR=$3 RUN_DIR=$4 MASTER_PORT=${5:-29500}
[[ -f "$RUN_DIR/spec.json" ]] || { echo "error: $RUN_DIR/spec.json not found on $(hostname): prepare the run directory on a shared file system first" >&2; exit 2; }
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python}
# The torchrun command line and the ranks' environment come from the kit (helpers/launch/torchrun.py),
# the same code the one-machine runner and the 2-node simulation use.
"$PY" -m helpers.launch.torchrun agent --nnodes "$NNODES" --nproc-per-node "$GPUS_PER_NODE" \
  --endpoint "$MASTER_ADDR:$MASTER_PORT" "$RUN_DIR" 2>&1 | tee "$RUN_DIR/logs/torchrun.$(hostname).log"
