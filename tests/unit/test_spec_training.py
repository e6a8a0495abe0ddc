"""Bad training specs are refused before anything starts, naming the field."""
import pytest

from testbed.experiments.training.model import place, spread
from testbed.spec import SpecError, TrainingJob, loads
from topologies import build
from topologies.model import at_rate


def spec(**training):
    return {"name": "t", "topology": {"kind": "fattree", "params": {"k": 4}},
            "experiments": [{"type": "training", **training}]}


BAD_TRAINING = [
    ({"model": "alexnet"}, "experiments[0].model: unknown 'alexnet'"),
    ({"jobs": [{"sync": "ps", "lr_staleness": "dynsgd"}]},
     "experiments[0].jobs[0].lr_staleness: weights pushes by their staleness"),
    ({"jobs": [{"lr_staleness": "dynsgd"}]}, "experiments[0].jobs[0].lr_staleness"),
    ({"jobs": [{"sync": "ps", "consistency": "ssp", "lr_staleness": "adaptive"}]},
     "experiments[0].jobs[0].lr_staleness: unknown 'adaptive'"),
    ({"jobs": [{"priority": "bytescheduler", "partition_params": 0}]},
     "experiments[0].jobs[0].partition_params: must be > 0"),
    ({"jobs": [{"priority": "bytescheduler", "credit_params": -1}]},
     "experiments[0].jobs[0].credit_params"),
    ({"jobs": [{"priority": "tictac", "credit_params": 1e6}]},
     "experiments[0].jobs[0].credit_params: for priority: bytescheduler"),
    ({"jobs": [{"priority": "fifo", "partition_params": 1e6}]},
     "experiments[0].jobs[0].partition_params: for priority: bytescheduler"),
    ({"model": "transformer", "jobs": [{"priority": "p3"}]},
     "experiments[0].jobs[0].priority: layer-wise synchronisation"),
    ({"jobs": [{"forward_ms": 100}]}, "experiments[0].jobs[0].forward_ms: emulated compute"),
    ({"jobs": [{"priority": "fifo", "forward_ms": -1}]}, "experiments[0].jobs[0].forward_ms"),
    ({"jobs": [{"priority": "bytescheduler", "partition_params": 1e14}]},
     "experiments[0].jobs[0].partition_params: out of range for a number of parameters"),
    ({"data": "mnist"}, "experiments[0].data"),
    ({"jobs": [{"sync": "allreduce"}]}, "experiments[0].jobs[0].sync: unknown 'allreduce'"),
    ({"jobs": [{"compression": "zip"}]}, "experiments[0].jobs[0].compression"),
    ({"jobs": [{"consistency": "eventual"}]}, "experiments[0].jobs[0].consistency"),
    ({"jobs": [{"workers": 17}]}, "experiments[0].jobs[0].workers: 17 workers need 17 hosts"),
    ({"workers": [4, 20]}, "experiments[0].jobs[0].workers: 20 workers"),
    ({"jobs": [{"sync": "ps", "workers": 15, "ps_shards": 2}]},
     "experiments[0].jobs[0].workers: 15 workers and 2 servers need 17 hosts"),
    ({"jobs": [{"sync": "ps", "workers": 1, "ps_shards": 16}]},
     "experiments[0].jobs[0].ps_shards: 16 dedicated servers leave no host for workers"),
    ({"jobs": [{"sync": "ps", "workers": 2, "ps_shards": 3, "ps_placement": "colocated"}]},
     "experiments[0].jobs[0].ps_shards: 3 colocated servers need as many workers"),
    ({"jobs": [{"compression": "topk", "topk_ratio": 1.5}]}, "experiments[0].jobs[0].topk_ratio"),
    ({"jobs": [{"compression": "qsgd", "qsgd_levels": 0}]}, "experiments[0].jobs[0].qsgd_levels"),
    ({"jobs": [{"compression": "terngrad", "terngrad_clip": 0}]},
     "experiments[0].jobs[0].terngrad_clip"),
    ({"jobs": [{"compression": "sbc", "topk_ratio": 0}]}, "experiments[0].jobs[0].topk_ratio"),
    ({"jobs": [{"sync": "ps", "priority": "p3"}]}, "experiments[0].jobs[0].priority"),
    ({"jobs": [{"sync": "local", "compression": "fp16"}]}, "experiments[0].jobs[0].compression"),
    ({"background": [{"kind": "iperf", "hosts": ["h1", "h99"]}]},
     "experiments[0].background[0].hosts: no host 'h99'"),
    ({"straggler": {"worker": 4}}, "experiments[0].straggler.worker"),
    ({"iters": 5, "warmup_iters": 5}, "experiments[0].warmup_iters"),
    ({"p3_dscp": [46, 46]}, "experiments[0].p3_dscp"),
    ({"jobs": [{"optimizer": "adam"}]}, "experiments[0].jobs[0].optimizer: unknown 'adam'"),
    ({"jobs": [{"sync": "ps", "optimizer": "lars"}]}, "experiments[0].jobs[0].optimizer"),
    ({"jobs": [{"priority": "p3", "optimizer": "lamb"}]}, "experiments[0].jobs[0].optimizer"),
    ({"jobs": [{"lr_scaling": "log"}]}, "experiments[0].jobs[0].lr_scaling"),
    ({"jobs": [{"batch": -1}]}, "experiments[0].jobs[0].batch"),
    ({"jobs": [{"weight_decay": -0.1}]}, "experiments[0].jobs[0].weight_decay"),
    ({"jobs": [{"sync": "ps", "lr_scaling": "linear"}]}, "experiments[0].jobs[0].lr_scaling"),
    ({"jobs": [{"priority": "fifo", "weight_decay": 0.1}]},
     "experiments[0].jobs[0].weight_decay"),
    ({"jobs": [{"epochs": 2, "warmup_epochs": 2}]}, "experiments[0].jobs[0].warmup_epochs"),
    ({"iters": 4, "warmup_iters": 1, "jobs": [{"fusion": "mgwfbp"}]},
     "experiments[0].jobs[0].fusion: mgwfbp plans after 4 iterations"),
    ({"jobs": [{"fusion": "wfbp", "compression": "fp16"}]}, "experiments[0].jobs[0].fusion"),
    ({"jobs": [{"fusion": "horovod", "cycle_ms": 0}]}, "experiments[0].jobs[0].cycle_ms"),
    ({"fault": {"worker": 0, "at_iter": 10}, "jobs": [{"epochs": 1, "batch": 128}]},
     "experiments[0].fault.at_iter: must be in 0..2"),
    ({"warmup_iters": 2, "jobs": [{"epochs": 1, "batch": 512}]},
     "experiments[0].jobs[0].epochs: 1 epochs are 1 iterations with 4 workers"),
    ({"jobs": [{"workerz": 4}]}, "experiments[0].jobs[0].workerz: unknown key"),
]


@pytest.mark.parametrize("training,field", BAD_TRAINING)
def test_bad_training_specs_name_the_field(training, field):
    with pytest.raises(SpecError) as err:
        loads(spec(**training))
    assert str(err.value).startswith(field), str(err.value)


def test_good_training_spec_and_placement():
    s, topo = loads(spec(jobs=[{"sync": "ps", "workers": 8, "ps_shards": 2}], rates_mbps=[10]))
    job = s.experiments[0].jobs[0]
    p = place(topo, job, 8)
    assert len(p.servers) == 2 and len(p.workers) == 8
    assert not set(p.servers) & set(p.workers)
    assert [r for r, _, _ in p.ranks] == list(range(10))
    # workers spread over the pods, not packed on one edge switch
    assert spread([f"h{i}" for i in range(1, 17)], 4) == ["h1", "h5", "h9", "h13"]
    colo = place(topo, TrainingJob(sync="ps", workers=4, ps_shards=2,
                                   ps_placement="colocated"), 4)
    assert colo.servers == colo.workers[:2]
    slow = at_rate(build("fattree", k=4), 50, "h1", 5)
    rates = {(l.a, l.b): l.rate_mbps for l in slow.links}
    assert all(r == (5 if "h1" in k else 50) for k, r in rates.items())


def test_a_bcube_server_receives_on_each_of_its_ports():
    from testbed.experiments.training.model import ingress_spread
    bc = build("bcube", n=4, k=1)
    hosts = [h.name for h in bc.hosts]
    # BCube(4,1): 3 senders share h's level-0 switch, 3 its level-1 switch, and 9 reach it
    # through a relay on either level (4.5 each): the busiest port carries 7.5 of 15
    assert ingress_spread(bc, hosts[0], hosts) == pytest.approx(15 / 7.5)
    # senders that all share the level-0 switch arrive on that one port
    assert ingress_spread(bc, hosts[0], hosts[:4]) == pytest.approx(1.0)
    ft = build("fattree", k=4)
    assert ingress_spread(ft, "h1", [h.name for h in ft.hosts]) == 1.0


def test_colocated_shards_send_replies_too():
    from testbed.experiments.training.model import predict
    S, n, k = 1000.0, 8, 4
    job = TrainingJob(sync="ps", workers=n, ps_shards=k, ps_placement="colocated")
    _, sent = predict(job, n, int(S), S, 1, 1e6, 0.0)
    pull = S + 4 * k
    # 4 plain hosts push S; 4 shard hosts push 3/4 S and reply (n-1) slices of S/k
    assert sent == pytest.approx((4 * S + 4 * (0.75 * S + 7 * pull / 4)) / 8)
    ded = TrainingJob(sync="ps", workers=n, ps_shards=1)
    assert predict(ded, n, int(S), S, 1, 1e6, 0.0)[1] == S


def test_ring_flows_sharing_an_uplink_share_its_rate():
    from testbed.experiments.training.model import ring_link_load
    ls = build("leafspine", spines=1, leaves=2, hosts_per_leaf=4)
    h = [x.name for x in ls.hosts]
    # ring alternating leaves: two ring flows leave each leaf through its one uplink
    assert ring_link_load(ls, [h[0], h[4], h[1], h[5]]) == pytest.approx(2.0)
    # the same hosts in leaf order: one flow per uplink and direction
    assert ring_link_load(ls, [h[0], h[1], h[4], h[5]]) == pytest.approx(1.0)
    # a faster uplink carries two host-rate flows without sharing
    fast = build("leafspine", spines=1, leaves=2, hosts_per_leaf=4, uplink_rate=200)
    assert ring_link_load(fast, [h[0], h[4], h[1], h[5]]) == pytest.approx(1.0)
    ft = build("fattree", k=4)
    assert ring_link_load(ft, spread([x.name for x in ft.hosts], 8)) == pytest.approx(1.0)
