"""bench/router_logits.py records every MoE layer's router logits of a run's model."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bench import router_logits
from vmoe import experiment
from configs import tiny
from vmoe import run_protocol


def tiny_workdir(tmp_path, router='sparsity_ec'):
  """A workdir holding only the tiny config (eval batches of one 16-image routing group)."""
  tmp_path.mkdir(parents=True, exist_ok=True)
  config = tiny.get_config(f'router={router}')
  config.eval.batch_size = 16
  with open(tmp_path / run_protocol.CONFIG_FILE, 'w', encoding='utf-8') as f:   # As the trainer.
    json.dump(experiment.parse(config, num_devices=1).to_dict(), f)
  return tmp_path


def test_records_the_logits_of_every_router_call(tmp_path):
  config, model, params, step = router_logits.load_params(str(tiny_workdir(tmp_path)), init=True)
  images = jax.random.normal(jax.random.PRNGKey(0), (16, 28, 28, 1))
  logits = router_logits.record_router_logits(model, params, images)
  # Blocks 1 and 3 are MoE layers; one group of 16 images x 17 tokens, E = 8.
  assert step == 0 and [l.shape for l in logits] == [(1, 272, 8), (1, 272, 8)]
  # The first MoE layer's router sees the output of block 0's attention sublayer, normalised; its
  # logits are x W for that x: rerunning the model with W doubled doubles them.
  kernel = params['block_01']['moe']['router']['kernel']
  doubled = jax.tree.map(lambda p: p, params)
  doubled['block_01']['moe']['router']['kernel'] = 2 * kernel
  again = router_logits.record_router_logits(model, doubled, images)
  np.testing.assert_allclose(again[0], 2 * logits[0], rtol=1e-5, atol=1e-6)
  assert np.isfinite(logits[1]).all() and np.std(logits[0]) > 0


def test_cli_writes_float16_logits_with_the_run_and_step(tmp_path, capsys):
  workdir = tiny_workdir(tmp_path / 'sparsity_ec_c1')
  out = tmp_path / 'logits.npz'
  router_logits.main(['--workdir', str(workdir), '--out', str(out), '--batches', '2', '--init'])
  assert 'at step 0' in capsys.readouterr().out
  with np.load(out) as saved:   # 2 layers x 2 batches x 1 group (a 16-image eval batch).
    assert saved['logits'].shape == (4, 272, 8) and saved['logits'].dtype == np.float16
    assert str(saved['run']) == 'sparsity_ec_c1' and int(saved['step']) == 0


def test_errors_say_what_to_do(tmp_path):
  with pytest.raises(FileNotFoundError, match='training run'):
    router_logits.load_params(str(tmp_path), init=False)
  with pytest.raises(FileNotFoundError, match='no checkpoint; train it first or pass --init'):
    router_logits.load_params(str(tiny_workdir(tmp_path)), init=False)
  dense = tiny_workdir(tmp_path / 'dense', router='dense')
  with pytest.raises(ValueError, match='no router'):
    router_logits.main(['--workdir', str(dense), '--out', str(tmp_path / 'x.npz'), '--init'])
