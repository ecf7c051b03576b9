"""Training in process, as main.py does it: claim the workdir, then train the experiment the claim
returns (the trainer does not claim)."""
from vmoe.train import trainer
from vmoe.train import workdir as workdir_lib


def train(experiment, workdir: str, config_file: str = ''):
  """The summary of `experiment` trained in `workdir`, claimed first."""
  workdir = str(workdir)
  return trainer.train_and_evaluate(workdir_lib.claim(workdir, experiment), workdir, config_file)
