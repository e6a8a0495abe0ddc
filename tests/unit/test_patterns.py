"""Traffic patterns: seeded, the right shape, bad names refused naming the field."""
from collections import Counter

import pytest

from topologies import build
from topologies.patterns import PatternError, generate, parse, tiers

FT = build("fattree", k=4)
HOSTS = [h.name for h in FT.hosts]


def test_every_family_is_seeded_and_sends_from_every_host():
    for name in ("stride:4", "random", "randbij", "stag:0.2:0.3", "hotspot:2", "randx:3"):
        a, b = generate(name, FT, 7), generate(name, FT, 7)
        assert a == b, name  # replayable
        assert all(s != d for s, d in a), name
        per_host = 3 if name.startswith("randx") else 1
        assert Counter(s for s, _ in a) == {h: per_host for h in HOSTS}, name
    assert generate("random", FT, 1) != generate("random", FT, 2)


def test_shapes():
    assert generate("stride:8", FT, 0)[0] == ("h1", "h9")
    rb = generate("randbij", FT, 3)
    assert sorted(d for _, d in rb) == sorted(HOSTS)  # everyone receives once
    hot = generate("hotspot:1", FT, 5)
    receivers = Counter(d for _, d in hot)
    assert receivers.most_common(1)[0][1] == 15  # every other host sends to the hot one


def test_staggered_keeps_to_its_tiers():
    edge, pod, rest = tiers(FT, "h1")
    assert edge == ["h2"] and pod == ["h3", "h4"] and len(rest) == 12
    assert all(d in tiers(FT, s)[0] for s, d in generate("stag:1:0", FT, 1))
    assert all(d in tiers(FT, s)[1] for s, d in generate("stag:0:1", FT, 1))
    assert all(d in tiers(FT, s)[2] for s, d in generate("stag:0:0", FT, 1))
    # over many seeds the tiers come up about as often as asked
    flows = [f for seed in range(200) for f in generate("stag:0.2:0.3", FT, seed)]
    share_edge = sum(d in tiers(FT, s)[0] for s, d in flows) / len(flows)
    share_pod = sum(d in tiers(FT, s)[1] for s, d in flows) / len(flows)
    assert share_edge == pytest.approx(0.2, abs=0.02)
    assert share_pod == pytest.approx(0.3, abs=0.02)


@pytest.mark.parametrize("name, msg", [
    ("zigzag", "unknown pattern"), ("stride:16", "stride must be"), ("stride:0", "stride"),
    ("stride:1.5", "stride"), ("stag:1.2:0", "edge probability"), ("stag:0.2:-1", "pod"),
    ("stag:0.7:0.5", "add up"), ("stag:0.2", "takes 2"), ("hotspot:16", "hotspot count"),
    ("randx:0", "randx"), ("stride:x", "must be numbers")])
def test_bad_patterns_name_the_field(name, msg):
    with pytest.raises(PatternError) as err:
        parse(name, 16, field="flow_scheduling.patterns[0]")
    assert str(err.value).startswith("flow_scheduling.patterns[0]: ")
    assert msg in str(err.value)


def test_a_seed_in_the_name_fixes_the_pattern():
    assert generate("stag:0.2:0.3@1", FT, 99) == generate("stag:0.2:0.3", FT, 1)
    assert parse("randbij@2", 16).name == "randbij@2"
    with pytest.raises(PatternError):
        parse("random@x", 16)


def test_the_nonblocking_model_is_the_max_min_share_in_tcp_payload():
    from testbed.experiments.permutation.model import maxmin_model
    payload = (9000 - 52) / 9014
    # a permutation: every NIC full
    assert maxmin_model([(f"h{i}", f"h{(i + 1) % 4}") for i in range(4)], 4, 9000) == \
        pytest.approx(payload)
    # four senders into one receiver, 16 hosts: one NIC's worth of 16
    assert maxmin_model([(f"h{i}", "h0") for i in range(1, 5)], 16, 9000) == \
        pytest.approx(payload / 16)
    # h1 sends to h2 and h3; h4 also sends to h3: h1's flows 1/2 each, h4 -> h3 gets 1/2
    assert maxmin_model([("h1", "h2"), ("h1", "h3"), ("h4", "h3")], 4, 1500) == \
        pytest.approx(1.5 / 4 * 1448 / 1514)
