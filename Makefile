# vmoe-routers: every command a user or CI runs.
#   make install   create .venv and install pinned dependencies (idempotent)
#   make tpu-compiler  libtpu (~700 MB) in .venv/tpu-compiler, for make plan and bench (.ci/run too)
#   make test      the test suite (CI runs exactly this through .ci/run)
#   make bench     speed benchmarks, results in bench/results/, their tables in docs/benchmarks.md
#   make demo      the main job: one seed of the tiny study (dense ViT and the six routers at
#                  c = 1, 2 runs at a time) on embedded Fashion-MNIST; tables, figures, routing
#                  maps and its numbers beside the committed study's in results/demo/ (git-ignored)
#   make study     the committed tiny study: dense, the 6 paper routers and the 5 after it
#                  (STUDY_ROUTERS) x c in {1, 2}, and the softmax-combine ablation, $(STUDY_SEEDS)
#                  seeds, seed by seed, resumable; each finished run's summary.json goes
#                  to results/tiny/runs/ (to commit), then results/tiny/ is regenerated from them
#   make sweep ARCH=b32 [SEEDS=3] [OVERRIDES=--config.KEY=VALUE]   the 12 paper runs of one
#                  architecture + the softmax-combine ablation, in $(WORKDIRS)/ARCH; finished
#                  runs are skipped, so a killed sweep resumes. ARCH=ilsvrc_s32: the same grid on
#                  the ImageNet-1k rung (configs/ilsvrc_s32.py; its published cell is
#                  configs/ilsvrc_s32_vmoe.py)
#   make plan      docs/scaling.md: per-device memory and FLOPs of the paper's models and of the
#                  ImageNet-1k rung's cell, compiled by XLA:TPU from libtpu without a TPU
#                  (installs libtpu if missing; 62 programs compiled by PLAN_JOBS=2 processes, L/16's
#                  one at a time under 28 GiB of memory; resumable, cached in workdirs/plan; the
#                  rung's section alone: python -m launch.plan --rung-only). From an empty cache on
#                  2 vCPUs: 2.48 h at 86ac9ee (bench/results/make_plan.json)
#   make rehearsal configs/b32_sinkhorn_ec.py end to end at the paper's shapes on 8 simulated CPU
#                  devices (E = 8 experts): generated ImageNet archives, the builders, a few
#                  steps, a preemption, a resume, 10-shot over 1,000 classes; peak memory and
#                  checkpoint size in $(WORKDIRS)/rehearsal/rehearsal.json (launch/rehearsal.py;
#                  up to 45 minutes of 2 cores, about 19 GiB of memory, 15 GB of disk)
#   make goldens   testing/goldens/*.npz from the references' own code (python -m testing.goldens):
#                  checkouts VMOE=, BIG_VISION=, VISION_TRANSFORMER= at the commits it names;
#                  generator-only packages (requirements-goldens.txt) in $(VENV)/goldens-site
#   make tables    tables, figures and claims from every summary.json under $(TABLES_RUNS), in
#                  $(TABLES_OUT): by default the committed study's (results/tiny/runs ->
#                  results/tiny), with the pages of its prose/ templates (results/tiny/README.md,
#                  README.md's summary)
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TPU_COMPILER_STAMP := $(VENV)/tpu-compiler/.installed
SUDO := $(shell [ "$$(id -u)" != 0 ] && command -v sudo)
FASHION_MNIST_DIR ?= /usr/share/datasets/fashion-mnist

.PHONY: install tpu-compiler test bench fashion-mnist sweep tables demo study plan rehearsal goldens
ARCH ?= tiny
SEEDS ?= 1
WORKDIRS ?= workdirs
STUDY_RUNS := results/tiny/runs
STUDY_SEEDS ?= 5
# The study's routers: the dense ViT, the paper's six, and the five after it (vmoe/routing/lab_routers.py).
STUDY_ROUTERS := dense,softmax_tc,sinkhorn_tc,softmax_ec,sinkhorn_ec,sparsity_ec,soft_moe,sigmoid_tc,lossfree_tc,base,topp_tc,random_tc
TABLES_RUNS ?= $(STUDY_RUNS)
TABLES_OUT ?= results/tiny
# The tiny runs log to TensorBoard and metrics.jsonl only: wandb's start-up (~4 s a run) is left
# out; two runs at a time keep both cores busy (launch/sweep.py --jobs).
TINY_SWEEP = $(PY) -m launch.sweep --arch tiny --jobs 2 --python $(PY) --config.wandb.mode=disabled

install: $(STAMP) fashion-mnist

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -r requirements.txt
	touch $(STAMP)

# libtpu, outside the venv's path: only launch/tpu_compiler.py loads it (make plan, and one test
# that skips without it unless CI is set). Opt-in: ~700 MB that a user who trains does not need.
tpu-compiler: $(TPU_COMPILER_STAMP)

$(TPU_COMPILER_STAMP): requirements-tpu-compiler.txt $(STAMP)
	$(PY) -m pip install --no-deps --upgrade --target $(VENV)/tpu-compiler -r requirements-tpu-compiler.txt
	touch $(TPU_COMPILER_STAMP)

# The embedded default dataset: Debian's dataset-fashion-mnist (IDX files). Where apt is not
# available (e.g. macOS) the loader falls back to TFDS's own `fashion_mnist` download.
fashion-mnist:
	@if [ -d $(FASHION_MNIST_DIR) ]; then \
	  echo "Fashion-MNIST found in $(FASHION_MNIST_DIR)"; \
	elif command -v apt-get >/dev/null; then \
	  $(SUDO) apt-get install -y dataset-fashion-mnist || \
	  ($(SUDO) apt-get update && $(SUDO) apt-get install -y dataset-fashion-mnist); \
	else \
	  echo "apt-get not available: Fashion-MNIST will come from TFDS's fashion_mnist download instead"; \
	fi

# pytest-xdist workers: one per usable core, as many as the memory holds, 2 under CI
# (testing/workers.py); the embedded data sets are prepared first so that the workers do not race
# to prepare them. loadgroup keeps the tests that share a result computed in process
# (pytest.mark.xdist_group) on one worker.
test: install
	$(PY) -m data.prepare embedded
	$(PY) -m pytest -q -n $$($(PY) -m testing.workers) --dist loadgroup

bench: install tpu-compiler
	$(PY) -m bench.moe_layer --groups 16 --out bench/results/moe_layer.json
	$(PY) -m bench.moe_layer --groups 16 --expert-shards 32 --out bench/results/moe_layer_sharded.json
	$(PY) -m bench.train_step --out bench/results/train_step.json
	$(PY) -m bench.paper_step --out bench/results/paper_step.json
	$(PY) -m bench.paper_step --archs B/32 --dtypes float32 --per-device-batch 128 \
	  --out bench/results/paper_step_b32_batch128.json
	$(PY) -m bench.paper_step --archs VMoE-S/32 --out bench/results/paper_step_ilsvrc_s32.json
	$(PY) -m bench.auction --out bench/results/auction.json
	$(PY) -m bench.sparsity_solver --logits bench/data/router_logits_tiny.npz \
	  --out bench/results/sparsity_solver.json
	$(PY) -m bench.input_pipeline --out bench/results/input_pipeline.json
	$(PY) -m bench.device_augment --out bench/results/device_augment.json
	$(PY) -m bench.config_load --out bench/results/config_load.json
	$(PY) -m bench.tail_memory --tpu-images 8 64 --out bench/results/tail_memory.json
	$(PY) -m bench.report

sweep: install
	$(PY) -m launch.sweep --arch $(ARCH) --workdir-root $(WORKDIRS) --seeds $(SEEDS) \
	  --include-ablation --python $(PY) $(OVERRIDES)

tables: install
	$(PY) -m results.tables --runs $(TABLES_RUNS) --out $(TABLES_OUT)

# Never writes a tracked file: its runs go to $(WORKDIRS)/demo, its report to results/demo/.
demo: install
	$(TINY_SWEEP) --workdir-root $(WORKDIRS)/demo --capacities 1
	$(PY) -m results.tables --runs $(WORKDIRS)/demo/tiny --out results/demo --beside $(STUDY_RUNS)
	$(PY) -m launch.routing_maps --runs $(WORKDIRS)/demo/tiny --out results/demo/routing_maps.png

study: install
	$(TINY_SWEEP) --workdir-root $(WORKDIRS)/study --seeds $(STUDY_SEEDS) --include-ablation \
	  --routers $(STUDY_ROUTERS) --records $(STUDY_RUNS)
	$(PY) -m launch.routing_maps --runs $(WORKDIRS)/study/tiny --out results/tiny/routing_maps.png
	$(PY) -m results.tables --runs $(STUDY_RUNS) --out results/tiny

rehearsal: install
	$(PY) -m launch.rehearsal run --dir $(WORKDIRS)/rehearsal

PLAN_JOBS ?= 2
plan: install tpu-compiler
	MALLOC_ARENA_MAX=2 $(PY) -m launch.plan --jobs $(PLAN_JOBS) --out docs/scaling.md

VMOE ?= ../vmoe
BIG_VISION ?= ../big_vision
VISION_TRANSFORMER ?= ../vision_transformer
GOLDENS_SITE := $(VENV)/goldens-site
goldens: install
	$(PY) -m pip install --no-deps --target $(GOLDENS_SITE) -r requirements-goldens.txt
	$(PY) -m testing.goldens --vmoe $(VMOE) --big-vision $(BIG_VISION) \
	  --vision-transformer $(VISION_TRANSFORMER) --extra-site $(GOLDENS_SITE)
