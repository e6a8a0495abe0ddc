"""Large-model parallelism: tensor (Megatron-LM), pipeline (GPipe, 1F1B), sharded
data (ZeRO / FSDP) and expert parallelism, combined, with real Gloo collectives and real or
emulated compute.

Pure parts (no torch): `layout` (ranks, groups, placement on a fabric), `schedule`
(pipeline schedules and their bubble), `desc` (model descriptions as data, what each rank
exchanges and computes) and `cost` (the analytical model). The worker that runs them is
`worker` (torch, one process per rank).
"""
