"""Training jobs sharing one fabric: interference, cross-job placement, and the
cross-job policies of Crux, CASSINI and MLTCP as controller apps (controllers/jobpolicy.py),
each job alone and together, beside the fluid model (testbed/workloads/model/interference.py).
docs/JOBS.md.

    spec.py      the spec types, the cross-job placement and their checks
    model.py     classes, the links and ports jobs share, profiles, overlap, the model (pure)
    analysis.py  rows per job and round, phases on one time axis, links, decisions (pure)
    load.py      its load model for `testbed plan` (pure: each job by its kind's)
    run.py       the runner
    plots.py     plots from jobs.csv and jobs_phases.csv
"""
from ..base import Experiment
from .load import loads
from .plots import PLOTS, draw_dir
from .run import run
from .spec import Jobs

EXPERIMENT = Experiment(spec=Jobs, run=run, load=loads, plots=PLOTS, dir_plots=(draw_dir,))
