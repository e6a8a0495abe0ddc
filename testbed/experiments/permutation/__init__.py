"""Permutation throughput (Hedera's evaluation): every host sends to one other host in a
traffic pattern; the aggregate goodput of each routing (single path, ECMP, Hedera, a
non-blocking switch as the reference) as a fraction of the hosts' summed rate, and for
finite flows their completion times against one flow alone.

    spec.py      the spec type, its checks, a traffic pattern's name
    model.py     the max-min and proportionally fair models of a pattern's flows (pure)
    analysis.py  outages under faults, controller restarts, the headlines (pure)
    load.py      its load model for `testbed plan` (pure)
    run.py       the runner (a fabric per routing, probes beside the flows)
    plots.py     the plot from permutation.csv
"""
from ..base import Experiment
from .load import loads
from .plots import plot
from .run import run
from .spec import Permutation

EXPERIMENT = Experiment(spec=Permutation, run=run, load=loads, plots={"permutation.csv": plot})
