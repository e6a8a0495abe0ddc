"""The workloads as data and formulas, importing no runtime: iperf3 flows, the training
analytical model, the jobs' fluid model and their exchange files, and a parallel rank's
layout, schedules, model descriptions and cost model."""
