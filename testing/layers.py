"""The project's layers, declared once: which of its packages a module may import.

A module may import its own unit and any unit of a lower rank; an import of a unit of the same or
a higher rank climbs. Units are top-level packages, vmoe's and data's subpackages, and data's
top-level modules. Beside the ranks:
- results/ is reporting code: it may import base/ and, of vmoe/, only the JAX-free names
  (REPORTING_MAY_IMPORT), and no JAX-era library at all (JAX_LIBRARIES);
- testing/ is imported by tests only: test files (*_test.py) and conftest.py files may import
  anything, and nothing else may import testing/.
- configs/ are data: they import ml_collections, base/, themselves and the plain modules (PLAIN:
  each section's config beside what it configures, which load neither JAX nor TensorFlow);
TENSORFLOW_FREE's entry points load without TensorFlow. testing/layers_test.py reads this table
and parses every module's imports.
"""
RANKS = {
    'base': 0,
    # data/ by concern (data/__init__.py): preprocessing, the config section, the sources, the
    # stream of batches, and the preparation command on top.
    'data': 1, 'data.pp': 2, 'data.config': 3, 'data.datasets': 4, 'data.stream': 5,
    'data.prepare': 6,
    'evaluation': 7,
    'vmoe': 8, 'vmoe.routing': 8, 'vmoe.run': 8,
    'vmoe.model': 9,
    'vmoe.train': 10,
    'configs': 11,
    'results': 12,   # Reporting: see REPORTING_MAY_IMPORT.
    'launch': 13, 'main': 13, 'docs': 13,
    'bench': 14,     # Benchmarks time what launch/ runs (bench/train_step.py, launch/sweep.py).
    'testing': 15,
}
# Of the units below it, what results/ may import: base/ and vmoe's JAX-free records.
REPORTING = 'results'
REPORTING_MAY_IMPORT = ('base', 'vmoe.routing.declarations', 'vmoe.run.run_outputs')
JAX_LIBRARIES = ('jax', 'flax', 'optax', 'orbax', 'tensorflow', 'tensorflow_datasets', 'clu')
# The modules that load no JAX-era library, by unit: the routers' declarations and configs, and
# every config section's dataclass (vmoe/train/experiment.py parses them).
PLAIN = (
    'data.config',                                                        # data
    'evaluation.eval_config', 'evaluation.fewshot',                       # evaluation
    'vmoe.routing.capacity', 'vmoe.routing.declarations', 'vmoe.routing.router_config',
    'vmoe.routing.user_module',                                           # vmoe.routing
    'vmoe.run.checkpoint_config', 'vmoe.run.wandb_config',                # vmoe.run
    'vmoe.model.mesh_config', 'vmoe.model.moe_config', 'vmoe.model.vit_config',   # vmoe.model
    'vmoe.train.optim_config',                                            # vmoe.train
)
CONFIGS = 'configs'
CONFIGS_MAY_IMPORT = ('ml_collections', 'base', 'configs')
TESTS_ONLY = 'testing'
# Entry points that run where JAX is installed but TensorFlow is not (the GPU machine this project
# borrows): neither they nor anything they import when loaded may import TensorFlow.
TENSORFLOW = ('tensorflow', 'tensorflow_datasets')
TENSORFLOW_FREE = ('bench.paper_step',)


def unit_of(module: str) -> str | None:
  """The unit of a dotted module name ('vmoe.train.trainer' -> 'vmoe.train'), None outside
  the project."""
  parts = module.split('.')
  for length in (2, 1):
    name = '.'.join(parts[:length])
    if name in RANKS:
      return name
  return None
