"""Mixup against V-MoE's own, at device granularity (testing/goldens/mixup.py)."""
import jax.numpy as jnp
import numpy as np

from configs import common
from configs import ilsvrc_s32_vmoe
from testing import goldens
from vmoe.train import train_step

U32 = 2.0**-24   # float32's unit roundoff.


def test_mixup_equals_v_moes_given_its_key_and_batch():
  g = goldens.load('mixup')
  # The concentrations of the paper configs and of the rung, against V-MoE's config files.
  concentrations = {'i21k': common.get_paper_config('B/32', 'softmax_tc').mixup_alpha,
                    'light1': ilsvrc_s32_vmoe.get_config().mixup_alpha}
  batch = {'image': jnp.asarray(g['image']), 'labels': jnp.asarray(g['labels'])}
  for name, concentration in concentrations.items():
    assert concentration == g[f'{name}_concentration'], name
    for key in (n for n in g.arrays if n.startswith('key')):
      mixed = train_step.mixup(batch, jnp.asarray(g[key]), concentration, int(g['devices']))
      for field in ('image', 'labels'):
        # Both sides draw the same gamma variates from the key (jax.random.dirichlet: the same
        # sampler over the same number of draws) and divide by their sum (2 roundings of each
        # weight); each output is w0 x_i + w1 x_i+1, two products and a sum (3 roundings), all
        # relative to at most max |x|: 2 (2 + 3) u max |x| between the two programs.
        bound = 2 * 5 * U32 * float(np.max(np.abs(g[field])))
        np.testing.assert_allclose(mixed[field], g[f'{name}_{key}_{field}'], rtol=0,
                                   atol=bound, err_msg=f'{name}, {key}, {field}')
