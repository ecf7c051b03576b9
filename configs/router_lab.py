"""Any registered router in one of the paper's cells: the B/32, B/16 or L/16 recipe of its
configs/<arch>_<router>.py files, with the router's own presets (its declaration's presets).

The paper's six routers have files of their own (configs/b32_sinkhorn_ec.py, ...), which record
the paper's numbers; this file serves the routers published since (vmoe/routing/lab_routers.py)
and a user's own (docs/routers.md), which launch/sweep.py runs through it.

  python main.py --config=configs/router_lab.py:arch=b32,router=lossfree_tc,c=1 \
      --workdir=runs/b32_lossfree_tc_c1
  python main.py \
      --config=configs/router_lab.py:arch=b16,router=my_router,router_module=my_router.py \
      --workdir=runs/b16_my_router_c1
CPU mode (a 'mu' model, 2 steps): add runlocal=True.
"""
from base import errors
from configs import common

ARCHS = {'b32': 'B/32', 'b16': 'B/16', 'l16': 'L/16'}


def get_config(arg=None):
  """arg: arch=b32|b16|l16 (default b32), router=NAME (default sigmoid_tc), c=1|2,
  router_module=PATH, runlocal=True."""
  lab = common.parse_arg(arg, arch='b32', router='sigmoid_tc', c=1.0, runlocal=False,
                         router_module='')
  if lab.arch not in ARCHS:
    raise errors.UserError(f'config argument arch={lab.arch!r}: valid: '
                           f'{", ".join(ARCHS)}.')
  config = common.get_paper_config(
      ARCHS[lab.arch], lab.router, f'c={lab.c:g},runlocal={lab.runlocal},'
      f'router_module={lab.router_module}')
  config.config_arg = lab.canonical
  return config
