"""A run's plumbing, whatever it trains: checkpoints and their checksums, preemption, the log
file, metric writers, the console, the run's outputs (summary.json) and the command line. May
import base/, evaluation/ and itself; not the model or the training loop.
"""
