"""The project's layers, declared once: which of its packages a module may import.

A module may import its own unit and any unit of a lower rank; an import of a unit of the same or
a higher rank climbs. Units are top-level packages, or vmoe's subpackages. Beside the ranks:
- results/ is reporting code: it may import base/ and, of vmoe/, only the JAX-free names
  (REPORTING_MAY_IMPORT), and no JAX-era library at all (JAX_LIBRARIES);
- testing/ is imported by tests only: test files (*_test.py) and conftest.py files may import
  anything, and nothing else may import testing/.
TENSORFLOW_FREE's entry points load without TensorFlow. testing/layers_test.py reads this table
and parses every module's imports.
"""
RANKS = {
    'base': 0,
    'data': 1,
    'evaluation': 2,
    'vmoe': 3, 'vmoe.routing': 3, 'vmoe.run': 3,
    'vmoe.model': 4,
    'vmoe.train': 5,
    'configs': 6,
    'results': 7,    # Reporting: see REPORTING_MAY_IMPORT.
    'launch': 8, 'main': 8, 'docs': 8,
    'bench': 9,      # Benchmarks time what launch/ runs (bench/train_step.py, launch/sweep.py).
    'testing': 10,
}
# Of the units below it, what results/ may import: base/ and vmoe's JAX-free records.
REPORTING = 'results'
REPORTING_MAY_IMPORT = ('base', 'vmoe.routing.names', 'vmoe.run.run_outputs')
JAX_LIBRARIES = ('jax', 'flax', 'optax', 'orbax', 'tensorflow', 'tensorflow_datasets', 'clu')
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
