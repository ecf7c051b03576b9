"""The former name of vmoe/train_program.py, kept only for the modules that still import it
(bench/, launch/plan.py, vmoe/multidevice_test.py, vmoe/precision_test.py, which others are
editing now); delete this file once they import vmoe.train_program."""
from vmoe.train_program import TrainProgram as Setup  # pylint: disable=unused-import
from vmoe.train_program import build  # pylint: disable=unused-import
from vmoe.train_program import build_step  # pylint: disable=unused-import
