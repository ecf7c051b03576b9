"""docs/accelerators.md's figures for the tail's memory are bench/results/tail_memory.json's."""
import json
import os

DOCS = os.path.dirname(os.path.abspath(__file__))
RESULT = os.path.join(os.path.dirname(DOCS), 'bench', 'results', 'tail_memory.json')


def test_the_memory_row_quotes_the_tails_measured_temporaries():
  with open(RESULT, encoding='utf-8') as f:
    rows = json.load(f)['rows']
  mb = {(r['tail'], r['compiler'].split()[0], r['images']): r['temp_mb_per_image'] for r in rows}
  with open(os.path.join(DOCS, 'accelerators.md'), encoding='utf-8') as f:
    page = f.read()
  assert (f"under XLA:TPU, {mb['rung', 'XLA:TPU', 8]:.2f} MB of temporaries an image at 8 images "
          f"and {mb['rung', 'XLA:TPU', 64]:.2f} at 64 for the rung's tail "
          f"({mb['paper', 'XLA:TPU', 8]:.2f} and {mb['paper', 'XLA:TPU', 64]:.2f} for the "
          "paper's randaug(2, 20)), under the 4 MB an image that "
          f"`bench/tail_memory_test.py` asserts, and {mb['rung', 'XLA:CPU', 64]:.2f} under "
          "XLA:CPU") in page


def test_the_memory_row_quotes_the_chunked_tails_temporaries_and_compile_times():
  # The step's tail (chunks of 8 images on each device), bench/results/tail_memory_chunked.json,
  # against the whole batch of 64 in one program (tail_memory.json).
  results = os.path.dirname(RESULT)
  with open(os.path.join(results, 'tail_memory_chunked.json'), encoding='utf-8') as f:
    chunked = {r['images']: r for r in json.load(f)['rows']
               if r['tail'] == 'rung' and r['compiler'].startswith('XLA:TPU') and r['chunk'] == 8}
  with open(RESULT, encoding='utf-8') as f:
    [whole] = [r for r in json.load(f)['rows'] if r['tail'] == 'rung' and r['images'] == 64 and
               r['compiler'].startswith('XLA:TPU')]
  with open(os.path.join(DOCS, 'accelerators.md'), encoding='utf-8') as f:
    page = f.read()
  assert (f"for the rung's tail, under XLA:TPU, {chunked[64]['temp_mb_per_image']:.2f} MB of "
          f"temporaries an image at 64 images and {chunked[512]['temp_mb_per_image']:.2f} at 512, "
          f"compiled in {chunked[64]['compile_cpu_seconds']} and "
          f"{chunked[512]['compile_cpu_seconds']} CPU-s, against "
          f"{whole['compile_cpu_seconds']} CPU-s for 64 images in one program") in page


def rung_peaks() -> dict:
  """scaling.md's rung section: each (slice, augment_on) row's peak column, as written."""
  with open(os.path.join(DOCS, 'scaling.md'), encoding='utf-8') as f:
    section = f.read().split('## The ImageNet-1k rung')[1]
  table = [[c.strip() for c in line.strip('|').split('|')]
           for line in section.splitlines() if line.startswith('| ')]
  header = table[0]
  return {(row[header.index('slice')], row[header.index('augment_on')]): row[header.index('peak')]
          for row in table[1:]}


def test_the_memory_row_quotes_the_rungs_planned_peaks_on_both_paths():
  peaks = rung_peaks()
  with open(os.path.join(DOCS, 'accelerators.md'), encoding='utf-8') as f:
    page = f.read()
  gpu, tpu = '8x H100 80GB', 'TPU v4-32'
  assert (f"| memory a GPU | {peaks[gpu, 'device']} GiB at the peak on the device path, the "
          f"rung's setting, against {peaks[gpu, 'host']} on the host path") in page
  assert (f"On a TPU v4-32, {peaks[tpu, 'device']} GiB a TensorCore on the device path against "
          f"{peaks[tpu, 'host']} on the host path") in page
