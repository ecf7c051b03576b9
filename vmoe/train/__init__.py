"""The training loop (trainer.py, which main.py calls) and what it runs: the experiment parsed
from a config (experiment.py), the step (train_step.py, train_program.py), the optimizer and the
losses, evaluations during training (train_evals.py), what the loop does besides its steps
(loop_actions.py) and the workdir a run claims (workdir.py). May import base/, data/,
evaluation/, vmoe/routing/, vmoe/model/, vmoe/run/ and itself.
"""
