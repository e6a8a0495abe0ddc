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
