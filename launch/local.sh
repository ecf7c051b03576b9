#!/usr/bin/env bash
# One machine: a Python command in one process that owns every local device, or in N processes
# joined by jax.distributed (the multi-host code path, e.g. on CPU, where gloo runs collectives).
#
#   launch/local.sh main.py --config=configs/tiny.py:router=sinkhorn_ec --workdir=workdirs/t
#   NUM_PROCESSES=2 launch/local.sh main.py --config=configs/tiny.py --workdir=workdirs/t2 \
#       --config.mesh.expert=2 --config.moe.group_size=8   # 8 divides 200 eval images/device
#   launch/local.sh -m launch.sweep --arch b32 --workdir-root workdirs --config.mesh.expert=8
#
# Every process runs the same command with JAX_COORDINATOR_ADDRESS (localhost, a free port or
# COORDINATOR_PORT), JAX_NUM_PROCESSES and JAX_PROCESS_ID set (read by vmoe/model/sharding.py);
# process i's output lines start with "[i] ". The exit status is that of the lowest-numbered
# process that failed (0 if none did).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
NUM_PROCESSES=${NUM_PROCESSES:-1}

if [[ $NUM_PROCESSES == 1 ]]; then
  exec "$PYTHON" "$@"
fi
free_port='import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'
PORT=${COORDINATOR_PORT:-$("$PYTHON" -c "$free_port")}
pids=() prefixers=()
trap 'kill -TERM "${pids[@]}" 2>/dev/null || true' TERM   # Each process checkpoints and exits.
trap ':' INT     # Ctrl-C reaches every process itself (same process group): wait for them.
for ((i = 0; i < NUM_PROCESSES; i++)); do
  # The prefixer outlives signals, so a process checkpointing after Ctrl-C can still print.
  exec {out}> >(trap '' INT TERM; exec sed -u "s/^/[$i] /")
  prefixers+=($!)
  JAX_COORDINATOR_ADDRESS=localhost:$PORT JAX_NUM_PROCESSES=$NUM_PROCESSES JAX_PROCESS_ID=$i \
    "$PYTHON" "$@" >&"$out" 2>&1 &
  pids+=($!)
  exec {out}>&-
done
status=0
for pid in "${pids[@]}"; do
  while :; do   # A trapped signal interrupts `wait`; the process itself is still running.
    wait "$pid" && code=0 || code=$?
    kill -0 "$pid" 2>/dev/null || break
  done
  [[ $status != 0 ]] || status=$code
done
wait "${prefixers[@]}" 2>/dev/null || true   # The last lines of output.
exit "$status"
