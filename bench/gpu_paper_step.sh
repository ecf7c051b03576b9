#!/bin/bash
# The paper step with MFU on one GPU, as run on a lent H100/H200 (docs/benchmarks.md):
#   OUT=DIR [ROUTERS=dense,softmax_tc,soft_moe] [ROUNDS=2] bash bench/gpu_paper_step.sh PART
# Per-device batches are an 8-GPU node's share of each recipe's global batch: B/32's 4096 / 8 =
# 512, the ImageNet-1k rung's 8192 / 8 = 1024; E is the recipe's (32, the rung's 8), all on the
# one device (no all-to-all). Wheels in .whl/ (ml_collections, and flax, optax, orbax-checkpoint
# at requirements.txt's versions) are installed where the machine lacks them or its own versions
# fail the smoke step.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:?set OUT to the folder for the result files}
PY=${PY:-python3}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
install() { $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site "$@" && export PYTHONPATH=.:/tmp/site; }
smoke() { $PY -c "import jax, flax, optax; print(jax.__version__, flax.__version__, optax.__version__)" &&
  timeout 120 $PY - <<'PYEOF'
import jax
from bench import step
from configs import common, tiny
s = step.Stepper(common.override(tiny.get_config('router=sinkhorn_ec,c=1'), {'batch_size': 32}))
s.load()
print('smoke ok', jax.devices()[0].device_kind, float(s()))
PYEOF
}
$PY -c "import ml_collections" 2>/dev/null || install .whl/ml_collections-*.whl
smoke || { install .whl/*.whl && smoke; } || exit 1
# One part a call: compiling B/32's five routers took 130 s on an H200 and their 3 rounds more
# than the 70 s left of a 200 s limit; three routers in 2 rounds took 204 s in all.
part=${1:-b32_float32}
case $part in
  b32_float32) flags="--archs B/32 --dtypes float32 --per-device-batch 512" ;;
  b32_bfloat16) flags="--archs B/32 --dtypes bfloat16 --per-device-batch 512" ;;
  ilsvrc_s32) flags="--archs VMoE-S/32 --dtypes float32 --per-device-batch 1024" ;;
  # The device augmentation's share of the GPU step (issue 51: at most 3%): each row on float32
  # batches and on uint8 batches with the pp's tail in the step.
  augment_s32) flags="--archs VMoE-S/32 --dtypes float32 --per-device-batch 1024 --augment-on host,device" ;;
  augment_b32) flags="--archs B/32 --dtypes float32 --per-device-batch 512 --augment-on host,device" ;;
  *) echo "part: b32_float32, b32_bfloat16, ilsvrc_s32, augment_s32 or augment_b32" >&2; exit 2 ;;
esac
timeout "${LIMIT:-540}" $PY -m bench.paper_step --rounds "${ROUNDS:-3}" --steps 3 --warmup 1 \
  ${ROUTERS:+--routers $ROUTERS} $flags --out "$OUT/paper_step_gpu_$part.json" 2>&1 |
  grep -v '^WARNING' | tail -20
ls -la "$OUT"
