"""The child process of the generator: runs one component's reference code, writes its golden.

`python -m testing.goldens.reference_side COMPONENT OUT META_JSON`, started by
testing/goldens/__main__.py with the references first on PYTHONPATH (testing/goldens/reference.py).
"""
import importlib
import importlib.metadata
import json
import sys

from base import host
from testing.goldens import META_KEY
from testing.goldens import npz
from testing.goldens import reference

# The libraries whose versions a golden records (those installed).
LIBRARIES = ('numpy', 'scipy', 'tensorflow', 'tensorflow-cpu', 'jax', 'jaxlib', 'flax', 'optax',
             'ott-jax', 'ml-collections', 'clu', 'einops', 'chex')


def library_versions() -> dict[str, str]:
  """The installed versions of LIBRARIES."""
  versions = {}
  for name in LIBRARIES:
    try:
      versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      pass
  return versions


def main(component_module: str, out: str, meta_json: str) -> int:
  context = reference.Context.from_environment()
  component = importlib.import_module(component_module)
  arrays = component.generate(context)
  cpu = host.this_cpu()
  meta = {**json.loads(meta_json), 'component': component_module,
          'reference_function': component.REFERENCE, 'patches': context.patches,
          'library_versions': library_versions(), 'cpu_model': cpu['cpu_model'],
          'cpu_flags': cpu['cpu_flags'], 'python': sys.version.split()[0]}
  npz.write(out, arrays, meta, META_KEY)
  return 0


if __name__ == '__main__':
  sys.exit(main(*sys.argv[1:]))
