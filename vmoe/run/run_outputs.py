"""What a training run leaves for those who start it and read it (launch.sweep, results/): its
exit status, its config.json and its summary.json.

A light module on purpose (no jax): the sweep and the tables read these without importing the
trainer.
"""
import dataclasses
import signal

# WORKDIR/SUMMARY_FILE is written atomically as the run's last act: it exists iff the run finished.
SUMMARY_FILE = 'summary.json'
# WORKDIR/CONFIG_FILE: the run's resolved config (Experiment.to_dict()), written at its start; a
# resumed run must have the same one, and vmoe/train/experiment.py parses it back.
CONFIG_FILE = 'config.json'
# The trainer's exit status after it saved its checkpoint on a Ctrl-C (SIGINT) it got: 128 + SIGINT,
# the status a shell gives a process killed by Ctrl-C, so the sweep stops as if it had been.
INTERRUPTED = 128 + signal.SIGINT
# Its exit status after it saved its checkpoint on a preemption notice (SIGTERM, to it or to another
# process of the run; vmoe/run/preemption.py): 0, as schedulers expect of a job that stopped
# cleanly. It writes no SUMMARY_FILE then, which tells it from a finished run: `stopped_early`.
PREEMPTED = 0


def stopped_early(status: int, finished: bool) -> bool:
  """Whether a trainer that exited with `status` (and wrote its SUMMARY_FILE iff `finished`)
  stopped on a signal after saving a checkpoint: a rerun of its command resumes it."""
  return status == INTERRUPTED or (status == PREEMPTED and not finished)


@dataclasses.dataclass(frozen=True)
class RunSummary:
  """summary.json: what a finished run trained, what it reached and what it cost.

  Identity (the seeds of one identity form a table row): arch, dataset, router ('dense' without
  MoE layers), capacity (c, or k for token choice; None for a dense model), softmax_combine.
  config / config_arg: the config file and its argument; resolved_config: the run's whole
  config after parsing (vmoe.train.experiment.Experiment.to_dict()), so that runs of one row can be
  checked to differ only in their seed. Results: upstream_prec1 (the last evaluation),
  eval_sets ({name: precision@1} of the last evaluation's eval.sets that ran),
  fewshot / fewshot_cv ({dataset: {shots: accuracy}}, best-l2 and CV conventions),
  router_metrics, eval_history ([{step, upstream_prec1}]). Cost: train_device_seconds (summed
  over devices), device_kind, num_devices, flops_per_step (the whole step over all devices,
  vmoe/train/flops.py's lowered count), compile_seconds. segments: where the
  steps ran, one entry per process lifetime that trained some, [{first_step, last_step, mesh:
  {data, expert}, num_devices, device_kind}] (a run may resume on another mesh: vmoe/
  loop_actions.py RunRecord). cpu_model and cpu_flags (base/host.py): the host CPU and its SIMD
  extensions; a run on another CPU kind is another seed, not a bit-identical copy.
  router_title, router_allocation: the registered router's title and allocation kind (None
  for the dense ViT), so that tables name a user's router and its capacity (k or c).
  commit, uncommitted_changes: the source the run's last process trained with (base/
  revision.py). router_health: per MoE block, the means over the logged training steps of the
  dropped tokens, the unfilled slots and a router state's range (loop_actions.HEALTH_METRICS),
  with their count, 'logged_steps'. Summaries written before a key existed read it as None.
  """
  arch: str
  dataset: str
  router: str
  capacity: float | None
  softmax_combine: bool = True
  seed: int = 0
  config: str = ''
  config_arg: str = ''
  steps: int | None = None
  num_params: int | None = None
  upstream_prec1: float | None = None
  eval_sets: dict | None = None
  fewshot: dict | None = None
  fewshot_cv: dict | None = None
  train_device_seconds: float | None = None
  device_kind: str | None = None
  num_devices: int | None = None
  flops_per_step: float | None = None
  compile_seconds: float | None = None
  router_metrics: dict | None = None
  eval_history: list | None = None
  resolved_config: dict | None = None
  cpu_model: str | None = None
  cpu_flags: list | None = None
  segments: list | None = None
  router_title: str | None = None
  router_allocation: str | None = None
  commit: str | None = None
  uncommitted_changes: bool | None = None
  router_health: dict | None = None

  def to_dict(self) -> dict:
    """The JSON object written to summary.json."""
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, values) -> 'RunSummary':
    """Reads a summary.json object; fails naming the identity keys it lacks. Keys this class
    does not know (a newer trainer's) are ignored."""
    if not isinstance(values, dict):
      raise ValueError('not a JSON object')
    missing = [k for k in ('arch', 'dataset', 'router') if values.get(k) is None]
    if values.get('capacity') is None and values.get('router') != 'dense':
      missing.append('capacity')
    if missing:
      raise ValueError(f'lacks {", ".join(missing)}')
    known = {f.name for f in dataclasses.fields(cls)}
    present = {k: v for k, v in values.items() if k in known and v is not None}
    return cls(**{'capacity': None, **present})


# The defaults a recorded config's missing keys take (vmoe/train/experiment.py
# recorded_defaults, committed as JSON so that reporting code compares records without JAX).
RECORDED_DEFAULTS = 'configs/recorded_defaults.json'


def config_differences(a: dict, b: dict, defaults: dict | None = None) -> list[str]:
  """The dotted keys ('moe.router.name') whose values differ between two configs in
  Experiment.to_dict()'s layout, a key only one of them holds included. With `defaults`
  (RECORDED_DEFAULTS' content), a key a record lacks counts as its default first."""
  flat_a, flat_b = _flatten(a), _flatten(b)
  if defaults is not None:
    flat_a, flat_b = _with_defaults(flat_a, defaults), _with_defaults(flat_b, defaults)
  absent = object()
  return sorted(k for k in set(flat_a) | set(flat_b)
                if flat_a.get(k, absent) != flat_b.get(k, absent))


def _flatten(tree: dict, prefix: str = '') -> dict:
  """{'moe.router.name': ...} of a nested dict."""
  flat = {}
  for key, value in tree.items():
    if isinstance(value, dict) and value:
      flat.update(_flatten(value, f'{prefix}{key}.'))
    else:
      flat[f'{prefix}{key}'] = value
  return flat


def _with_defaults(flat: dict, defaults: dict) -> dict:
  """A flattened record with the keys it lacks at their defaults: the sections' keys, and the
  options of its router (a built-in one)."""
  filled = {**defaults['keys'], **flat}
  router = flat.get('moe.router.name')
  options = defaults['router_options'].get(router, {})
  filled.update({f'moe.router.options.{k}': v for k, v in options.items()
                 if f'moe.router.options.{k}' not in flat})
  if options:
    filled.pop('moe.router.options', None)    # The empty block, now filled.
  return filled
