"""A parallel training job as data: ranks and groups, pipeline schedules, model
descriptions and the analytical iteration model, read by the worker and the experiment."""
