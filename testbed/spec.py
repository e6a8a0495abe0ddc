"""Specs, as users and scripts load them: importing this module registers every experiment
type (testbed/experiments/), whose spec classes the loader then picks by `type`. The types,
checks and defaults themselves live in the configuration layer (testbed/config/)."""
from testbed.config.loader import SpecError
from testbed.config.spec import ExperimentSpec, Spec, check, load, loads
from testbed.experiments import EXPERIMENTS
from testbed.experiments.calibration import LinkCalibration, QueueCalibration
from testbed.experiments.ecn_queue import EcnQueue
from testbed.experiments.incast import Incast
from testbed.experiments.permutation.spec import Permutation, parse_pattern
from testbed.experiments.pfc_victim import PfcVictim
from testbed.experiments.priority import PriorityQueues
from testbed.experiments.reachability import Reachability
from testbed.experiments.training.spec import Training, TrainingJob

__all__ = ["EXPERIMENTS", "EcnQueue", "ExperimentSpec", "Incast", "LinkCalibration",
           "Permutation", "PfcVictim", "PriorityQueues", "QueueCalibration", "Reachability",
           "Spec", "SpecError", "Training", "TrainingJob", "check", "load", "loads",
           "parse_pattern"]
