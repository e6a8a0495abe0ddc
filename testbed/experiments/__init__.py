"""Experiment types, each registered once here. To add one, write a module beside these
(its spec type, its runner, its load model for `testbed plan`, its pure analysis and its
plots, and an `Experiment` record) and list that record below; docs/ARCHITECTURE.md,
"Adding an experiment", walks through it. (`load.py` and `trainers/` are no types: what the
types' load models and the trainer experiments share.)"""
from __future__ import annotations

from . import (
               calibration,
               circuits,
               ecn_queue,
               incast,
               jobs,
               parallel,
               permutation,
               pfc_victim,
               priority,
               rdma,
               reachability,
               training,
)
from .base import CsvPlot, DirPlot, Experiment, register

EXPERIMENTS: dict[str, Experiment] = register(
    reachability.EXPERIMENT,
    calibration.LINKS,
    calibration.QUEUE,
    permutation.EXPERIMENT,
    ecn_queue.EXPERIMENT,
    priority.EXPERIMENT,
    incast.EXPERIMENT,
    pfc_victim.EXPERIMENT,
    rdma.EXPERIMENT,
    training.EXPERIMENT,
    parallel.EXPERIMENT,
    jobs.EXPERIMENT,
    circuits.EXPERIMENT,
)


def csv_plots() -> dict[str, CsvPlot]:
    """Every experiment type's plots, by the metrics CSV each is drawn from."""
    return {name: fn for e in EXPERIMENTS.values() for name, fn in e.plots.items()}


def dir_plots() -> list[DirPlot]:
    """Every plot that reads a whole results directory, each once."""
    return list(dict.fromkeys(p for e in EXPERIMENTS.values() for p in e.dir_plots))
