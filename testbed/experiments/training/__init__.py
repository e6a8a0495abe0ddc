"""Distributed training traffic: real `torch.distributed` Gloo workers in the emulated
hosts (ring allreduce, parameter servers with BSP/SSP/ASP, local SGD, compression, P3
priorities), every job's communication time beside the analytical model's
(testbed/workloads/model/commmodel.py), with its CPU headroom measured, because a CPU-bound
emulation does not give faithful numbers. docs/TRAINING.md.

    spec.py      the spec types and their checks
    model.py     placement, the model's prediction, the classes (pure)
    analysis.py  a job's summary from its ranks' records (pure)
    load.py      its load model for `testbed plan` (offline; times a real step)
    run.py       the runner (fabrics, jobs, background traffic)
    plots.py     plots from training.csv and training_iterations.csv

What the parallel and jobs experiments share with it (ranks, background traffic, the
CPU-bound verdict) is in ../trainers/.
"""
from ..base import Experiment
from .load import loads
from .plots import draw_dir, loss_curves
from .run import run
from .spec import Training

EXPERIMENT = Experiment(spec=Training, run=run, load=loads,
                        plots={"training_iterations.csv": loss_curves},
                        dir_plots=(draw_dir,))
