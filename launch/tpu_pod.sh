#!/usr/bin/env bash
# Cloud TPU VM pod slice: the same command on every worker over `gcloud ... ssh --worker=all`;
# jax.distributed finds the workers from the VM metadata (vmoe/model/sharding.py: cluster).
#
#   TPU=my-v3-32 ZONE=europe-west4-a launch/tpu_pod.sh main.py \
#       --config=configs/b32_sinkhorn_ec.py:c=1 --workdir=/mnt/shared/b32/sinkhorn_ec_c1 \
#       --config.mesh.expert=32
#   TPU=my-v3-32 ZONE=europe-west4-a DETACH=1 launch/tpu_pod.sh -m launch.sweep --arch b32 \
#       --workdir-root /mnt/shared/workdirs --config.mesh.expert=32
#
# Each worker needs this repository at REPO_DIR (default: ~/vmoe-routers, relative to the home
# directory) after `make install` and `.venv/bin/pip install "jax[tpu]==0.10.2"` (requirements.txt
# pins the CPU build).
# Workdirs must be on storage every worker sees (a Filestore/NFS mount or gcsfuse): orbax writes
# each worker's shards into the same checkpoint. DETACH=1 keeps the run going after ssh ends,
# logging to REPO_DIR/tpu_pod.log on every worker.
set -euo pipefail
: "${TPU:?set TPU to the TPU VM name}" "${ZONE:?set ZONE to its zone}"
run="${PYTHON:-.venv/bin/python} $(printf '%q ' "$@")"
if [[ ${DETACH:-0} == 1 ]]; then
  run="nohup $run > tpu_pod.log 2>&1 < /dev/null &"
fi
exec gcloud compute tpus tpu-vm ssh "$TPU" --zone="$ZONE" --worker=all \
  --command="cd ${REPO_DIR:-vmoe-routers} && $run"
