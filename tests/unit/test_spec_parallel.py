"""Bad parallel-training specs are refused before any process starts, naming the field."""
import pytest

from testbed.spec import SpecError, loads


def spec(**parallel):
    return {"name": "p", "topology": {"kind": "fattree", "params": {"k": 4}},
            "experiments": [{"type": "parallel", **parallel}]}


BAD_PARALLEL = [
    ({"jobs": [{"dp": 4, "tp": 2, "pp": 4}]}, "experiments[0].jobs[0].dp: 32 ranks need 32 hosts"),
    ({"jobs": [{"tp": 3}]}, "experiments[0].jobs[0].tp: 3 must divide hidden"),
    ({"jobs": [{"pp": 8}]}, "experiments[0].jobs[0].pp: 8 stages for 4 layers"),
    ({"jobs": [{"micro_batches": 0}]}, "experiments[0].jobs[0].micro_batches"),
    ({"jobs": [{"dp": 3, "ep": 2}]}, "experiments[0].jobs[0].ep: expert parallelism"),
    ({"jobs": [{"dp": 2, "ep": 2}]}, "experiments[0].jobs[0].ep: expert parallelism (2) needs"),
    ({"jobs": [{"schedule": "zb"}]}, "experiments[0].jobs[0].schedule: unknown 'zb'"),
    ({"jobs": [{"zero": 4}]}, "experiments[0].jobs[0].zero"),
    ({"jobs": [{"placement": "tight"}]}, "experiments[0].jobs[0].placement: unknown 'tight'"),
    ({"jobs": [{"dp": 2, "hosts": ["h1", "h1"]}]}, "experiments[0].jobs[0].hosts: a host appears twice"),
    ({"jobs": [{"dp": 2, "hosts": ["h1", "h99"]}]}, "experiments[0].jobs[0].hosts: no host 'h99'"),
    ({"jobs": [{"dp": 2, "hosts": ["h1"]}]}, "experiments[0].jobs[0].hosts: 1 hosts for 2 ranks"),
    ({"model": "gpt5"}, "experiments[0].model: unknown 'gpt5'"),
    ({"model_desc": {"layers": 2, "hidden": 64}}, "experiments[0].model_desc.heads: required"),
    ({"model_desc": {"layers": 2, "hidden": 64, "heads": 3, "seq": 8}},
     "experiments[0].model.heads: must divide hidden"),
    ({"device_tflops": None}, "experiments[0].device_tflops: emulated compute needs a device"),
    ({"layer_fwd_s": 0.01}, "experiments[0].layer_fwd_s: give both"),
    ({"scale": 0}, "experiments[0].scale: must be > 0"),
    ({"scale": -1}, "experiments[0].scale: must be > 0"),
    ({"compute": "real", "jobs": [{"tp": 3}]}, "experiments[0].jobs[0].tp: 3 must divide real.width"),
    ({"compute": "real", "jobs": [{"dp": 2, "ep": 2}]}, "experiments[0].jobs[0].ep: real compute"),
    ({"compute": "real", "jobs": [{"pp": 2, "micro_batches": 5}]},
     "experiments[0].jobs[0].micro_batches: 5 must divide"),
    ({"dscp": {"tp": 70}}, "experiments[0].dscp.tp: DSCP"),
    ({"dscp": {"xx": 1}}, "experiments[0].dscp: unknown 'xx'"),
    ({"transport": "nccl"}, "experiments[0].transport: unknown 'nccl'"),
    ({"jobs": [{"pp": 2, "pipemare": {"lr_steps": 10}}]},
     "experiments[0].jobs[0].pipemare: only with schedule: pipemare"),
    ({"jobs": [{"schedule": "pipemare"}]}, "experiments[0].jobs[0].schedule: pipemare pipelines"),
    ({"jobs": [{"pp": 2, "dp": 2, "zero": 3, "schedule": "pipemare"}]},
     "experiments[0].jobs[0].zero: pipemare"),
    ({"transport": "roce", "jobs": [{"pp": 2, "schedule": "pipemare"}]},
     "experiments[0].jobs[0].schedule: pipemare runs over gloo"),
    ({"jobs": [{"pp": 2, "schedule": "pipemare", "pipemare": {"decay": 0.5}}]},
     "experiments[0].jobs[0].pipemare: its corrections act on real compute"),
    ({"compute": "real", "jobs": [{"pp": 2, "schedule": "pipemare", "pipemare": {"decay": 1.5}}]},
     "experiments[0].jobs[0].pipemare.decay"),
    ({"compute": "real", "jobs": [{"pp": 2, "schedule": "pipemare", "pipemare": {"backward": "old"}}]},
     "experiments[0].jobs[0].pipemare.backward: unknown 'old'"),
    ({"compute": "real", "jobs": [{"pp": 2, "schedule": "pipemare", "pipemare": {"lr_steps": -1}}]},
     "experiments[0].jobs[0].pipemare.lr_steps"),
    ({"transport": "roce", "compute": "real"}, "experiments[0].transport: roce carries"),
    ({"transport": "roce", "roce": {"schemes": ["tcp-dctcp"]}},
     "experiments[0].roce.schemes[0]: 'tcp-dctcp' is TCP"),
    ({"transport": "roce", "roce": {"schemes": ["bbr"]}},
     "experiments[0].roce.schemes[0]: a congestion control first"),
    ({"transport": "roce", "roce": {"roce_mtu": 1000}}, "experiments[0].roce.roce_mtu"),
    ({"transport": "roce", "roce": {"qps_per_flow": 0}}, "experiments[0].roce.qps_per_flow"),
    ({"transport": "roce", "roce": {"flows": [{"src": "h1", "dst": "h2", "size_bytes": 1}]}},
     "experiments[0].roce: the transport's settings only"),
    ({"transport": "roce", "roce": {"spray_entropies": 4, "source_port": "per_qp"}},
     "experiments[0].roce.spray_entropies: sprayed packets"),
    ({"transport": "roce", "roce": {"source_port": "per_qp"}, "routings": ["vlb"]},
     "experiments[0].roce.source_port: per_qp"),
]


@pytest.mark.parametrize("parallel,field", BAD_PARALLEL)
def test_bad_parallel_specs_name_the_field(parallel, field):
    with pytest.raises(SpecError) as err:
        loads(spec(**parallel))
    assert str(err.value).startswith(field), str(err.value)


def test_good_parallel_spec():
    s, _ = loads(spec(jobs=[{"dp": 4, "tp": 2, "pp": 2, "micro_batches": 4,
                             "placement": "spread"}]))
    job = s.experiments[0].jobs[0]
    assert job.layout.world == 16 and job.label() == "dp4-tp2-pp2-1f1b-m4-spread"


def test_a_roce_transport_spec():
    s, _ = loads(spec(transport="roce", roce={"schemes": ["dcqcn", "hpcc+irn"],
                                              "qps_per_flow": 4, "source_port": "per_qp"},
                      jobs=[{"dp": 4}]))
    exp = s.experiments[0]
    assert exp.transport == "roce" and exp.roce.schemes == ["dcqcn", "hpcc+irn"]
    assert exp.roce.qps_per_flow == 4 and exp.roce.dscp == 26


def test_a_rank_may_not_hold_more_queue_pairs_than_an_engine():
    data = spec(transport="roce", roce={"qps_per_flow": 64}, jobs=[{"dp": 66}])
    data["topology"] = {"kind": "fattree", "params": {"k": 8}}
    with pytest.raises(SpecError, match=r"experiments\[0\].roce.qps_per_flow: a rank of "
                                        r"dp66-tp1-pp1-packed would hold 4160 queue pairs"):
        loads(data)
