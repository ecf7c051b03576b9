"""The training program: an experiment record -> model, optimizer, state layout, compiled step."""
import jax
import numpy as np

from data import config as data_config
from evaluation import eval_config
from evaluation import fewshot
from vmoe.model import mesh_config
from vmoe.model import moe_config
from vmoe.model import sharding
from vmoe.model import vit_config
from vmoe.routing import router_config
from vmoe.run import checkpoint_config
from vmoe.run import wandb_config
from vmoe.train import experiment as experiment_lib
from vmoe.train import optim_config
from vmoe.train import train_program


def mu_experiment(router='softmax_ec', num_experts=4) -> experiment_lib.Experiment:
  """A 'mu/4' V-MoE on 8x8x1 images, batches of 4 (two routing groups of 2 images)."""
  pp = 'decode(channels=1)|value_range(-1, 1)|onehot(10)|keep("image", "labels")'
  return experiment_lib.Experiment(
      seed=0, batch_size=4, num_train_steps=10, loss='softmax_xent', mixup_alpha=0.0,
      log_every_steps=1,
      model=vit_config.ModelConfig('mu/4', num_classes=10, image_size=8, channels=1,
                                   head_bias_init=0.0),
      moe=moe_config.MoeConfig(num_experts, group_size=2,
                            router=router_config.RouterConfig(router, capacity_factor=1.0)),
      data=data_config.DataConfig(name='digits', train_split='train', eval_split='test',
                                  pp_train=pp, pp_eval=pp, num_classes=10, shuffle_buffer=1),
      optimizer=optim_config.OptimizerConfig(weight_decay=0.1),
      schedule=optim_config.ScheduleConfig(peak_lr=1e-3, warmup_steps=0),
      eval=eval_config.EvalConfig(every_steps=10, batch_size=4),
      fewshot=fewshot.FewShotConfig({}, 'decode', batch_size=4, every_steps=10),
      checkpoint=checkpoint_config.CheckpointConfig(every_steps=10),
      wandb=wandb_config.WandbConfig(project='test', mode='disabled'),
      mesh=mesh_config.MeshConfig())


def test_the_compiled_step_trains_from_the_fresh_state():
  experiment = mu_experiment()
  program = train_program.build(experiment)
  assert program.abstract_batch()['image'].shape == (4, 8, 8, 1)
  assert program.abstract_state.params['block_01']['moe']['experts']['wi'].shape == (4, 32, 128)
  # mu/4 on 8x8 (5 tokens, width 32, MLP 128): embedding 16*32 + 32 = 544, class token 32,
  # posemb 5*32 = 160; per block LayerNorms 128 and attention 4*(32*32 + 32) = 4,224; block 0's
  # MLP 32*128 + 128 + 128*32 + 32 = 8,352; block 1's 4 experts 33,408 and router 32*4 = 128;
  # final LayerNorm 64; head 32*10 + 10 = 330. Sum: 51,722.
  assert program.num_params() == 51_722
  state = program.init_state(jax.random.PRNGKey(0))
  assert jax.tree.map(lambda a: a.sharding, state.params) == program.state_shardings.params
  batch = {'image': np.zeros((4, 8, 8, 1), np.float32),
           'labels': np.eye(10, dtype=np.float32)[[0, 1, 2, 3]]}
  compiled = program.compile()
  state, metrics = compiled(state, sharding.put_batch(batch, program.batch_sharding),
                            jax.random.PRNGKey(1))
  assert int(state.step) == 1 and np.isfinite(float(metrics['loss']))
  # Ten classes, zero-initialised head: the first loss is log(10).
  np.testing.assert_allclose(float(metrics['loss']), np.log(10), rtol=1e-5)


def test_the_resolved_record_is_json_in_the_config_layout():
  record = mu_experiment().to_dict()
  assert record['moe']['router']['name'] == 'softmax_ec'
  assert record['moe']['router']['sparsity_steps'] == 5      # Resolved from c = 1.
  assert record['fewshot']['shots'] == [10] and record['mesh'] == {'data': -1, 'expert': 1}
