#!/usr/bin/env bash
# SLURM, multi-node GPUs: srun starts one task per GPU on every node, all running the same
# command; jax.distributed takes the coordinator (the step's first node), the process count and
# each process's id and GPU (SLURM_LOCALID) from SLURM (vmoe/model/sharding.py: cluster).
#
#   sbatch launch/slurm.sh main.py --config=configs/b32_sinkhorn_ec.py:c=1 \
#       --workdir=/shared/workdirs/b32/sinkhorn_ec_c1 --config.mesh.expert=8
#   sbatch --nodes=8 launch/slurm.sh -m launch.sweep --arch b32 --workdir-root /shared/workdirs \
#       --config.mesh.expert=32
#
# GPUs need `.venv/bin/pip install "jax[cuda12]==0.10.2"` after `make install` (requirements.txt
# pins the CPU build). Submit from the repository root (the job runs there). Workdirs must be on a
# filesystem every node sees: orbax writes each process's shards into the same checkpoint. A
# requeued or resubmitted job resumes from the newest checkpoint. Edit the #SBATCH lines for your
# cluster.
#SBATCH --job-name=vmoe
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8
#SBATCH --time=48:00:00
#SBATCH --output=slurm-%j.out
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
# Every task sees all of its node's GPUs and jax picks the one of its SLURM_LOCALID; a failing
# task stops the others instead of leaving them waiting in a collective.
srun --kill-on-bad-exit=1 --label "${PYTHON:-.venv/bin/python}" "$@"
