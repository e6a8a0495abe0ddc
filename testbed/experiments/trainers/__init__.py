"""What the experiment types that run trainer processes share (training, parallel, jobs:
one process per rank, in the emulated hosts), so that none of them reaches into another's
runner. Not an experiment type: nothing here is registered.

    model.py       a host's link, and when a job's numbers are the machine's (pure)
    analysis.py    a rank's records, the switch queues a job met (pure)
    ranks.py       a job's ranks started in their hosts, and which failed first
    background.py  the background traffic beside a job
    load.py        what their load models for `testbed plan` share: a real step, timed once
"""
