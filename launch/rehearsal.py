"""make rehearsal: a paper run end to end at the paper's shapes on this CPU, before renting a pod.

  .venv/bin/python -m launch.rehearsal run [--dir=workdirs/rehearsal] [--experts=8]
  .venv/bin/python -m launch.rehearsal estimate [--experts=8,16,24,32]

`run` trains CONFIG (configs/b32_sinkhorn_ec.py: 224 px, patch 32, width 768, 12 blocks, MoE on
every other block, a head of 21,843 classes) on NUM_DEVICES simulated CPU devices with the config's
own mesh (mesh.expert = gcd(8, E) = 8: data 1 x expert 8), in stages, each its own process:
  estimate  the memory of E experts (below); E is refused if it exceeds this machine's memory.
  generate  an ImageNet-21k fall11 archive and the two ImageNet-1k archives, in the releases'
            layouts, of photograph-sized JPEGs (data/datasets/imagenet21k.py photo; `Scale`).
  build     both with `python -m data.prepare build`, the builders a user runs on the real ones.
  train     main.py: RandAugment and mixup (the config's), 64 images a step. A SIGTERM after
            step STOP_AFTER, as a preemption sends, makes it save a checkpoint of the whole state
            and exit.
  resume    the same command in a new process: it restores that checkpoint onto the mesh, trains
            to NUM_STEPS, saves, evaluates upstream and 10-shot over ImageNet-1k's 1,000 classes
            and writes summary.json.
It then checks each stage's outcome, prints the peak memory of the whole process tree and the
checkpoint's size, and writes DIR/rehearsal.json (REPORT_FILE). Every change to the paper config
is in `overrides`, with its reason. `--scale=runlocal` runs the same stages on the runlocal
model (mu/32) and tiny images (launch/rehearsal_test.py).

Memory (`estimate`). With P parameters, the training process holds at its peak:
  the state on the devices: float32 parameters and Adam's two float32 moments, 12 bytes a
    parameter for every copy the simulated devices hold. On the paper's mesh for 8 devices
    (expert = 8, data = 1) an expert's weights live on one device, but every other leaf is
    replicated on all 8, and each simulated device keeps its copy in host memory;
  the gradients during a step, 4 bytes a parameter per copy (the step donates the state: the new
    one takes its buffers);
  the asynchronous save's host copy of the state, 12P bytes (one copy of each shard), alive while
    it is written, which overlaps the next step or the evaluation;
plus ALLOWANCE_BYTES, 5 GiB, for what the abstract state does not show: about 3 GiB that the
runlocal rehearsal (1 M parameters) peaks at here (the interpreters, TensorFlow's pipeline at
224 px, XLA's buffers), and about 2 GiB of activations that a 64-image B/32 step keeps for its
backward pass (64 x 50 tokens x 12 blocks x some 12,000 float32 each: 15 vectors of width 768 and
12 heads x 50 attention weights). P and the shardings come from the trainer's own abstract state.
For B/32 with a 21,843-class head, P = 75,917,907 + 6 E 4,723,200: the ViT's patch embedding,
class token, position embeddings, 12 attention blocks, 6 dense MLPs and its head (all
replicated), and in each of the 6 MoE layers E experts of 2 x 768 x 3,072 weights and 3,840
biases (sharded), and 768 router weights per expert (replicated). Hence (`estimate`):
  E = 4:  P = 189.3 M, arrays 14.6 GiB (the expert axis is 4, so experts are held twice)
  E = 8:  P = 302.6 M, arrays 15.8 GiB, with the allowance 20.8 GiB
  E = 16: P = 529.3 M, arrays 21.7 GiB, with the allowance 26.7 GiB: not on a 24 GiB machine
E = 8 (DEFAULT_EXPERTS) is the most that fits 24 GiB. A first attempt at E = 16 was killed by the
kernel at 24.3 GB of resident memory while it saved its checkpoint, which is what this count
(then without the devices' copies) had missed. The checkpoint holds the state, at most 12P bytes
as orbax compresses it: 3.6 GB at E = 8, twice on disk (keep = 2). Run it on an otherwise idle
machine: another process's few GiB decide whether E = 8 fits.
"""
import argparse
import contextlib
import dataclasses
import glob
import importlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

from base import atomic
from base import errors
from vmoe.model import mesh_config
from vmoe.run import run_outputs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_MODULE = 'configs.b32_sinkhorn_ec'
CONFIG = CONFIG_MODULE.replace('.', '/') + '.py'
NUM_DEVICES = 8
NUM_STEPS = 4
STOP_AFTER = 2                 # The first process gets its SIGTERM after this step's progress line.
DEFAULT_EXPERTS = 8            # The most that fit 24 GiB (module docstring).
HOLDOUT = 64                   # Upstream evaluation images: one routing group on each device.
SHOTS = 10                     # Per ImageNet-1k class: exactly the 10-shot set.
ALLOWANCE_BYTES = 5 * 2 ** 30
GIB = 2 ** 30
REPORT_FILE = 'rehearsal.json'
FALL11 = 'imagenet21k/fall11'  # The release the paper configs count (data/datasets/imagenet21k.py
                               # RELEASES[0]).
SAMPLE_SECONDS = 0.5
# The console lines the stages are recognised by: observability.Progress's progress line and
# console.header's start.
PROGRESS_LINE = 'step {step}/{steps} '
RESUMED = 'resumed from step {step} '


@dataclasses.dataclass(frozen=True)
class Scale:
  """The generated data and the model of one rehearsal.

  image_size: (height, width) of every generated JPEG; 375 x 500 is ImageNet's most common size.
  synsets, images_per_synset: the ImageNet-21k archive; its first HOLDOUT images (in the stored
    order) are the upstream evaluation split, the rest the training split.
  validation_images: ImageNet-1k's validation split, the 10-shot test split (50,000 in the
    release; SHOTS x 1,000 training images are the whole training split).
  variant: model.variant, the paper's or the runlocal model.
  """
  image_size: tuple[int, int]
  synsets: int
  images_per_synset: int
  validation_images: int
  variant: str

  @property
  def train_images(self) -> int:
    return self.synsets * self.images_per_synset - HOLDOUT


SCALES = {
    # 512 training images: the 4 steps of 64 see each once at most.
    'paper': Scale((375, 500), synsets=64, images_per_synset=9, validation_images=1_000,
                   variant='B/32'),
    'runlocal': Scale((12, 16), synsets=16, images_per_synset=8, validation_images=100,
                      variant='mu/32'),
}


@dataclasses.dataclass(frozen=True)
class Override:
  """One change to the paper config, as main.py's --config.KEY=VALUE, and why."""
  key: str
  value: object
  reason: str

  def flag(self) -> str:
    return f'--config.{self.key}={self.value}'


def overrides(scale: Scale, experts: int, directory: str) -> list[Override]:
  """Every change the rehearsal makes to CONFIG: the one list of them."""
  paths = _paths(directory)
  data_dir, archives = paths['data'], paths['archives']
  changes = [
      Override('moe.num_experts', experts, 'the paper\'s E = 32 does not fit 24 GiB (estimate)'),
      Override('batch_size', NUM_DEVICES * 8, 'the paper\'s 4,096 images take minutes a step '
               'here; 64 is one routing group of 8 images on each device'),
      Override('num_train_steps', NUM_STEPS, 'a few steps, a stop and a resume'),
      Override('schedule.warmup_steps', STOP_AFTER, 'must be below num_train_steps'),
      Override('log_every_steps', 1, 'a progress line after every step: the stop follows one'),
      Override('wandb.mode', 'disabled', 'no network needed'),
      Override('data.data_dir', data_dir, 'the generated sets, prepared here'),
      Override('data.manual_dir', archives, 'the generated archives'),
      Override('data.train_split', f'full[{HOLDOUT}:]', 'V-MoE\'s holdout is the first 102,400 '
               f'images; the generated set holds {scale.train_images + HOLDOUT:,}'),
      Override('data.eval_split', f'full[:{HOLDOUT}]', 'as data.train_split'),
      Override('data.train_images', scale.train_images, 'the size check counts fall11\'s '
               'training images'),
      Override('eval.batch_size', HOLDOUT, 'the whole holdout in one batch; 4,096 would pad it'),
      Override('fewshot.data_dir', data_dir, 'the generated ImageNet-1k, prepared here'),
      Override('fewshot.batch_size', 256, '4,096 images of 224 px are 2.3 GiB of input a batch'),
      Override('fewshot.seeds', 1, 'each seed extracts the 10,000 shots\' features again'),
  ]
  if scale.variant != SCALES['paper'].variant:
    changes.append(Override('model.variant', scale.variant, 'the runlocal model (the test)'))
  return changes


def _paths(directory: str) -> dict:
  directory = os.path.abspath(directory)
  return {name: os.path.join(directory, name) for name in ('archives', 'data', 'run')}


# ---------------------------------------------------------------------------------------------
# The stages run in processes of their own (`estimate`, `generate`): the driver imports neither
# jax nor TensorFlow, so that the measured peak is the stages'.


def estimate(scale: Scale, experts: int) -> dict:
  """The training process's memory for `experts` experts (module docstring), from the abstract
  state of the rehearsal's own experiment."""
  # pylint: disable=g-import-not-at-top
  import jax
  import numpy as np
  from configs import common
  from vmoe.train import experiment as experiment_lib
  from vmoe.model import sharding
  from vmoe.train import train_program
  config = importlib.import_module(CONFIG_MODULE).get_config()
  common.override(config, {o.key: o.value for o in overrides(scale, experts, '.')})
  experiment = experiment_lib.parse(config, num_devices=NUM_DEVICES)
  one_device = sharding.make_mesh(mesh_config.MeshConfig(data=1, expert=1), jax.devices()[:1])
  state = train_program.build(experiment, one_device).abstract_state
  expert_shards = experiment.mesh.expert

  def held(tree) -> tuple[int, int]:
    """(bytes of one copy, bytes the simulated devices hold): the experts' leaves are split over
    the expert axis and replicated over the data axis, every other leaf replicated on all."""
    once = on_devices = 0
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
      size = int(np.prod(leaf.shape)) * leaf.dtype.itemsize
      sharded = 'experts' in jax.tree_util.keystr(path)
      once += size
      on_devices += size * (NUM_DEVICES // expert_shards if sharded else NUM_DEVICES)
    return once, on_devices

  (params, params_held), (adam, adam_held) = held(state.params), held(state.opt_state)
  # The state and the gradients on the devices; the save's host copy holds one of each shard.
  arrays = (params_held + adam_held) + params_held + (params + adam)
  return {'experts': experts,
          'num_params': int(sum(np.prod(p.shape) for p in jax.tree.leaves(state.params))),
          'param_bytes': params, 'adam_bytes': adam, 'param_bytes_held': params_held,
          'adam_bytes_held': adam_held, 'array_bytes': arrays,
          'estimate_bytes': arrays + ALLOWANCE_BYTES}


def generate(directory: str, scale: Scale) -> None:
  """Writes fall11_whole.tar and ImageNet-1k's two archives (SHOTS training images of each of
  its classes, scale.validation_images validation images) in DIR/archives."""
  # pylint: disable=g-import-not-at-top
  import tensorflow_datasets as tfds
  from data.datasets import imagenet21k
  from data.datasets import sources
  paths = _paths(directory)
  os.makedirs(paths['archives'], exist_ok=True)
  photo = lambda seed: imagenet21k.photo(seed, scale.image_size)

  def synset_images(synset: str, count: int, first_seed: int):
    return ((f'{synset}_{j}.JPEG', photo(first_seed + j)) for j in range(count))   # Lazy.

  per = scale.images_per_synset
  synsets = [f'n{i + 1:08d}' for i in range(scale.synsets)]
  imagenet21k.write_archive(
      os.path.join(paths['archives'], imagenet21k.RELEASES[0].archive),
      {s: synset_images(s, per, i * per) for i, s in enumerate(synsets)})
  classes = tfds.builder('imagenet2012', data_dir=paths['data']).info.features['label'].names
  train, validation = sources.IMAGENET2012_ARCHIVES
  first = scale.synsets * per
  imagenet21k.write_archive(   # The release's layout: a tar of one tar per class.
      os.path.join(paths['archives'], train),
      {c: synset_images(c, SHOTS, first + i * SHOTS) for i, c in enumerate(classes)})
  first += len(classes) * SHOTS
  # TFDS labels the validation images by their sorted names, from its own list of 50,000 labels.
  imagenet21k.write_archive(os.path.join(paths['archives'], validation), {}, extra={
      f'ILSVRC2012_val_{i + 1:08d}.JPEG': photo(first + i) for i in range(scale.validation_images)})


# ---------------------------------------------------------------------------------------------
# The driver.


def check_fits(needed: dict, available: int) -> None:
  """A UserError if `estimate`'s result exceeds `available` bytes of memory."""
  if needed['estimate_bytes'] > available:
    raise errors.UserError(
        f'E={needed["experts"]} experts need about {needed["estimate_bytes"] / GIB:.1f} GiB '
        f'(`python -m launch.rehearsal estimate`), more than this machine\'s '
        f'{available / GIB:.1f} GiB; pass fewer with --experts.')


class RehearsalFailed(Exception):
  """A stage did not do what a paper run needs of it."""


class PeakMemory:
  """The process tree's peak memory, per stage: sampled every SAMPLE_SECONDS in a thread, the sum
  of each live process's own peak resident memory (Linux's VmHWM). A process's peak is read at
  its last sample before it exits, so a spike between samples is not missed; the sum is an upper
  bound where two processes peak at different times. None where /proc is missing (not Linux)."""

  def __init__(self):
    self.peaks: dict[str, int | None] = {}
    self._stage = None
    self._done = threading.Event()
    self._thread = threading.Thread(target=self._sample_until_done, daemon=True)

  def __enter__(self) -> 'PeakMemory':
    self._thread.start()
    return self

  def __exit__(self, *exc_info):
    self._done.set()
    self._thread.join()

  @contextlib.contextmanager
  def stage(self, name: str):
    self.peaks[name] = tree_peak_bytes()
    self._stage = name
    try:
      yield
    finally:
      self._stage = None

  def _sample_until_done(self):
    while not self._done.wait(SAMPLE_SECONDS):
      stage = self._stage
      value = tree_peak_bytes()
      if stage is not None and value is not None:
        self.peaks[stage] = max(self.peaks[stage] or 0, value)


def tree_peak_bytes(root: int | None = None) -> int | None:
  """The sum of VmHWM over process `root` (default: this one) and all its descendants."""
  if not os.path.isdir('/proc/self'):
    return None
  children = {}
  for stat in glob.glob('/proc/[0-9]*/stat'):
    try:
      with open(stat, encoding='utf-8') as f:
        fields = f.read().rpartition(')')[2].split()   # After the command's name: state, ppid.
    except OSError:
      continue   # Gone meanwhile.
    children.setdefault(int(fields[1]), []).append(int(stat.split('/')[2]))
  total, pending = 0, [root or os.getpid()]
  while pending:
    pid = pending.pop()
    pending += children.get(pid, [])
    try:
      with open(f'/proc/{pid}/status', encoding='utf-8') as f:
        total += next((int(line.split()[1]) * 1024 for line in f if line.startswith('VmHWM:')), 0)
    except OSError:
      pass
  return total


def run_stage(name: str, command: list[str], memory: PeakMemory, seconds: dict,
              on_line=None) -> int:
  """Runs `command` from the repository's root on NUM_DEVICES CPU devices, its output shown and
  given line by line to on_line(process, line); its exit status."""
  print(f'== {name}: {shlex.join(command)}', flush=True)
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'XLA_FLAGS': (
      f'{os.environ.get("XLA_FLAGS", "")} --xla_force_host_platform_device_count={NUM_DEVICES}')}
  start = time.monotonic()
  with memory.stage(name):
    with subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors='replace') as process:
      for line in process.stdout:
        sys.stdout.write(line)
        if on_line is not None:
          on_line(process, line)
  seconds[name] = time.monotonic() - start
  return process.returncode


def _require(status: int, name: str):
  if status != 0:
    raise RehearsalFailed(f'{name} exited with status {status} (its output is above).')


def checkpoint_steps(workdir: str) -> list[int]:
  """The steps of the complete checkpoints in WORKDIR/checkpoints (orbax names them by step)."""
  directory = os.path.join(workdir, 'checkpoints')
  return sorted(int(n) for n in os.listdir(directory) if n.isdigit()) if os.path.isdir(
      directory) else []


def directory_bytes(directory: str) -> int:
  return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(directory)
             for f in files)


def _train_and_resume(train: list[str], workdir: str, memory: PeakMemory, seconds: dict
                      ) -> list[int]:
  """The training stage, stopped after step STOP_AFTER as a preemption notice stops it, then the
  resume stage from its checkpoint; the steps saved. Raises RehearsalFailed where either did not
  do so."""
  def stop_after(process, line):
    if line.startswith(PROGRESS_LINE.format(step=STOP_AFTER, steps=NUM_STEPS)):
      process.send_signal(signal.SIGTERM)   # What a preemption notice sends.
  status = run_stage('train', train, memory, seconds, stop_after)
  summary_path = os.path.join(workdir, run_outputs.SUMMARY_FILE)
  saved = checkpoint_steps(workdir)
  if not run_outputs.stopped_early(status, os.path.exists(summary_path)) or not saved:
    raise RehearsalFailed(f'train: expected a stop with a checkpoint after step {STOP_AFTER}; '
                          f'got exit status {status}, checkpoints {saved}.')
  resumed = []
  status = run_stage('resume', train, memory, seconds, lambda _, line: resumed.append(
      RESUMED.format(step=saved[-1]) in line))
  _require(status, 'resume')
  if not any(resumed):
    raise RehearsalFailed(f'resume: did not say it resumed from step {saved[-1]}.')
  return saved


def run(directory: str, scale_name: str, experts: int, python: str = sys.executable) -> dict:
  """All the stages (module docstring) in DIRECTORY, emptied first; the report, also written to
  DIR/REPORT_FILE. Raises RehearsalFailed naming the first stage that failed, or UserError if
  `experts` do not fit this machine's memory."""
  scale, paths = SCALES[scale_name], _paths(directory)
  for path in paths.values():
    shutil.rmtree(path, ignore_errors=True)
  os.makedirs(paths['run'])
  changes = overrides(scale, experts, directory)
  seconds, this = {}, [python, '-m', 'launch.rehearsal']
  with PeakMemory() as memory:
    estimate_file = os.path.join(paths['run'], 'estimate.json')
    _require(run_stage('estimate', this + ['estimate', f'--experts={experts}',
                                           f'--scale={scale_name}', f'--json={estimate_file}'],
                       memory, seconds), 'estimate')
    with open(estimate_file, encoding='utf-8') as f:
      needed = json.load(f)[0]
    check_fits(needed, os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES'))
    _require(run_stage('generate', this + ['generate', f'--dir={directory}',
                                           f'--scale={scale_name}'], memory, seconds), 'generate')
    for name in (FALL11, 'imagenet2012'):
      _require(run_stage(f'build {name}', [
          python, '-m', 'data.prepare', 'build', name, f'--manual_dir={paths["archives"]}',
          f'--data_dir={paths["data"]}'], memory, seconds), f'build {name}')
    workdir = os.path.join(paths['run'], 'workdir')
    train = [python, 'main.py', f'--config={CONFIG}', f'--workdir={workdir}'] + [
        c.flag() for c in changes]
    saved = _train_and_resume(train, workdir, memory, seconds)
  summary_path = os.path.join(workdir, run_outputs.SUMMARY_FILE)
  with open(summary_path, encoding='utf-8') as f:
    summary = json.load(f)
  with open(os.path.join(workdir, run_outputs.CONFIG_FILE), encoding='utf-8') as f:
    mesh = json.load(f)['mesh']
  tenshot = (summary.get('fewshot') or {}).get('imagenet2012', {}).get(str(SHOTS))
  if summary.get('steps') != NUM_STEPS or tenshot is None:
    raise RehearsalFailed(f'resume: summary.json lacks the {NUM_STEPS} steps or the 10-shot '
                          f'result ({summary_path}).')
  peaks = [p for p in memory.peaks.values() if p is not None]
  report = {
      'config': CONFIG, 'scale': scale_name, 'experts': experts,
      'num_params': summary['num_params'], 'mesh': mesh, 'num_devices': summary['num_devices'],
      'overrides': [dataclasses.asdict(c) for c in changes], 'estimate': needed,
      'stopped_after_step': saved[-1], 'upstream_prec1': summary['upstream_prec1'],
      'imagenet2012_10shot': tenshot,
      'checkpoint_bytes': directory_bytes(os.path.join(workdir, 'checkpoints', str(NUM_STEPS))),
      'peak_bytes': max(peaks) if peaks else None, 'stage_peak_bytes': memory.peaks,
      'stage_seconds': seconds, 'seconds': sum(seconds.values()),
      'summary': summary_path}
  atomic.write_json(os.path.join(directory, REPORT_FILE), report)
  return report


def _gib(num_bytes: int | None) -> str:
  if num_bytes is None:
    return 'n/a'
  return f'{num_bytes / GIB:.2f} GiB' if num_bytes >= GIB / 10 else f'{num_bytes / 2 ** 20:.1f} MiB'


def describe(report: dict) -> str:
  """The closing lines: what ran, what it cost, each override and why."""
  lines = [
      f'Rehearsal passed: {report["config"]} ({report["scale"]}), E = {report["experts"]}, '
      f'{report["num_params"]:,} parameters, mesh {report["mesh"]} on {report["num_devices"]} '
      f'devices; stopped after step {report["stopped_after_step"]}, resumed to {NUM_STEPS}.',
      f'10-shot ImageNet-1k (1,000 classes): {report["imagenet2012_10shot"]:.4f}; upstream '
      f'prec@1 {report["upstream_prec1"]:.4f} (generated images: only the path is checked).',
      f'Peak memory of the process tree: {_gib(report["peak_bytes"])} (estimate '
      f'{_gib(report["estimate"]["estimate_bytes"])}); checkpoint of step {NUM_STEPS}: '
      f'{_gib(report["checkpoint_bytes"])}; {report["seconds"] / 60:.1f} minutes.',
      'Stages: ' + ', '.join(f'{n} {report["stage_seconds"][n]:.0f} s, '
                             f'{_gib(report["stage_peak_bytes"][n])}'
                             for n in report['stage_seconds']) + '.',
      'Overrides of the paper config:']
  lines += [f'  --config.{o["key"]}={o["value"]}: {o["reason"]}.' for o in report['overrides']]
  return '\n'.join(lines)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  commands = parser.add_subparsers(dest='command', required=True)
  run_parser = commands.add_parser('run', help='all the stages; writes DIR/rehearsal.json')
  run_parser.add_argument('--dir', default='workdirs/rehearsal',
                          help='where the archives, prepared sets and run go (emptied first)')
  estimate_parser = commands.add_parser('estimate', help='the memory of E experts')
  estimate_parser.add_argument('--json', help='also write the estimates to this file')
  generate_parser = commands.add_parser('generate', help='the archives alone (a stage of run)')
  generate_parser.add_argument('--dir', required=True)
  for command, experts in ((run_parser, str(DEFAULT_EXPERTS)), (estimate_parser, '8,16,24,32'),
                           (generate_parser, None)):
    command.add_argument('--scale', choices=SCALES, default='paper')
    if experts:
      command.add_argument('--experts', default=experts, help='experts (comma-separated for '
                           f'estimate); default {experts}')
  args = parser.parse_args(argv)
  if args.command == 'generate':
    generate(args.dir, SCALES[args.scale])
    return 0
  try:
    experts = [int(e) for e in args.experts.split(',')]
  except ValueError:
    parser.error(f'--experts: expected integers, got {args.experts!r}')
  if min(experts) < 1 or (args.command == 'run' and len(experts) > 1):
    parser.error(f'--experts: expected {"one integer" if args.command == "run" else "integers"} '
                 f'>= 1, got {args.experts!r}')
  if args.command == 'estimate':
    results = [estimate(SCALES[args.scale], e) for e in experts]
    for r in results:
      print(f'E = {r["experts"]}: {r["num_params"]:,} parameters; arrays {_gib(r["array_bytes"])}'
            f', with the allowance {_gib(r["estimate_bytes"])}')
    if args.json:
      atomic.write_json(args.json, results)
    return 0
  try:
    report = run(args.dir, args.scale, experts[0])
  except RehearsalFailed as e:
    print(f'Rehearsal failed: {e}', file=sys.stderr)
    return 1
  print(describe(report))
  return 0


if __name__ == '__main__':
  sys.exit(errors.run_tool(main))
