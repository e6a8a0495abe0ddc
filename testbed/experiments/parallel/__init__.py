"""Large-model parallel training: tensor, pipeline (GPipe, 1F1B), sharded
(ZeRO / FSDP) and expert parallelism, combined, with real Gloo workers placed on the
fabric, real or emulated compute, and every collective type's bytes and time beside the
analytical model (testbed/workloads/model/parallel/cost.py). docs/PARALLEL.md.

    spec.py      the spec types and their checks
    model.py     each rank's job, the bandwidth each collective type gets, the core bytes
                 the model expects, the classes (pure)
    analysis.py  a job's summary and its rows per collective type (pure)
    load.py      its load model for `testbed plan` (pure)
    expect.py    what the analytical and path-aware models expect of a job, for the
                 runner and `testbed plan` (pure)
    run.py       the runner
    plots.py     plots from parallel.csv and parallel_kinds.csv
"""
from ..base import Experiment
from .expect import expectations
from .load import loads
from .plots import draw_dir
from .run import run
from .spec import Parallel

EXPERIMENT = Experiment(spec=Parallel, run=run, load=loads, dir_plots=(draw_dir,),
                        expect=expectations)
