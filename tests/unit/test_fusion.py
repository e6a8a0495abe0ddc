"""When gradients go (workloads/fusion.py): the model's overlap of backward and messages,
MG-WFBP's merge as its authors' code makes it, the optimum against every grouping on small
cases, and Horovod's cycles."""
import random

import pytest

from testbed.workloads.fusion import (
    CommModel,
    best_groups,
    fusion,
    mgwfbp_groups,
    one_group,
    optimal_groups,
    overlap,
    pack,
    ready_times,
    wfbp_groups,
)


def test_overlap_follows_the_papers_recurrence():
    # three layers, backward 1 ms each from the last; messages a = 0.5 ms, 1 us/byte
    comm = CommModel(a=0.0005, b=1e-6)
    tb, sizes = [0.001, 0.001, 0.001], [1000, 2000, 500]
    assert ready_times(tb) == pytest.approx([0.003, 0.002, 0.001])
    each = overlap(wfbp_groups(3), sizes, tb, comm)
    # layer 2 at 1 ms for 1 ms; layer 1 ready at 2 ms, goes at 2 ms for 2.5 ms; layer 0
    # ready at 3 ms waits until 4.5 ms, 1.5 ms
    assert [t for m in each.messages for t in m[1:]] == pytest.approx(
        [0.001, 0.002, 0.002, 0.0045, 0.0045, 0.006])
    assert each.backward_s == pytest.approx(0.003) and each.exposed_s == pytest.approx(0.003)
    one = overlap(one_group(3), sizes, tb, comm)
    assert one.end_s == pytest.approx(0.003 + 0.0005 + 0.0035)


def transcribed_mgwfbp(sizes, tb, comm):
    """The authors' _generate_groups_mgwfbp, as written (the whole recurrence recomputed
    after each merge)."""
    n = len(sizes)
    p, tc = list(sizes), [comm.time(s) for s in sizes]
    taob = [0.0] * n
    for l in range(n - 2, -1, -1):
        taob[l] = taob[l + 1] + tb[l + 1]

    def comm_start():
        taoc = [0.0] * n
        taoc[n - 1] = taob[n - 1] + tb[n - 1]
        for l in range(n - 2, -1, -1):
            taoc[l] = max(taoc[l + 1] + tc[l + 1], taob[l] + tb[l])
        return taoc
    taoc, groups, group = comm_start(), [], []
    for l in range(n - 1, 0, -1):
        group.append(l)
        ready = taob[l - 1] + tb[l - 1]
        if ready < taoc[l] + tc[l] and (taoc[l] > ready or ready - taoc[l] < comm.a):
            tc[l], p[l - 1], p[l] = 0.0, p[l - 1] + p[l], 0
            tc[l - 1] = comm.time(p[l - 1])
            taoc = comm_start()
        else:
            groups.append(group)
            group = []
    group.append(0)
    groups.append(group)
    return groups


def cases(n_cases, seed=1):
    rng = random.Random(seed)
    for _ in range(n_cases):
        n = rng.randint(1, 7)
        yield ([rng.choice([4, 400, 40_000, 400_000, 4_000_000]) for _ in range(n)],
               [rng.uniform(1e-4, 1e-2) for _ in range(n)],
               CommModel(a=rng.choice([1e-5, 1e-4, 1e-3, 5e-3]),
                         b=rng.choice([1e-9, 1e-8, 8e-8])))


def test_mgwfbp_merges_as_its_authors_code_does():
    for sizes, tb, comm in cases(400):
        assert mgwfbp_groups(sizes, tb, comm) == transcribed_mgwfbp(sizes, tb, comm)
    # start-up cost dominant: everything merged; negligible: nothing is
    tb = [0.001] * 6
    assert mgwfbp_groups([1000] * 6, tb, CommModel(a=0.01, b=1e-9)) == [[5, 4, 3, 2, 1, 0]]
    assert mgwfbp_groups([1000] * 6, tb, CommModel(a=1e-6, b=1e-9)) == wfbp_groups(6)


def test_the_optimum_is_the_best_of_every_grouping_and_mgwfbp_near_it():
    gaps = []
    for sizes, tb, comm in cases(400, seed=2):
        best = overlap(best_groups(sizes, tb, comm), sizes, tb, comm).end_s
        assert overlap(optimal_groups(sizes, tb, comm), sizes, tb, comm).end_s == \
            pytest.approx(best, rel=1e-12)
        greedy = overlap(mgwfbp_groups(sizes, tb, comm), sizes, tb, comm).end_s
        assert greedy >= best * (1 - 1e-12)
        gaps.append(greedy / best)
    # MG-WFBP's merge is the optimum in most cases, and never far from it in these
    assert sum(g < 1 + 1e-9 for g in gaps) / len(gaps) > 0.9 and max(gaps) < 1.3


def test_horovods_cycles_fuse_what_is_ready_up_to_the_threshold():
    comm = CommModel(a=0.001, b=1e-8)
    sizes, tb = [400_000] * 4, [0.002] * 4          # ready at 2, 4, 6, 8 ms
    groups, timing = fusion(sizes, tb, comm, threshold=800_000, cycle_s=0.005)
    # a negotiation (16 bytes of flags) every cycle: at 0 nothing is ready; at 5 ms layers
    # 3 and 2 (one buffer of 800 kB) go after it; the next cycle starts when that is done
    # (5 + 1 + 9 ms = 15 ms) with layers 1 and 0
    assert groups == [[3, 2], [1, 0]]
    assert [m[1] for m in timing.messages] == pytest.approx([0.006 + 16e-8, 0.016 + 32e-8])
    small, _ = fusion(sizes, tb, comm, threshold=400_000, cycle_s=0.005)
    assert small == [[3], [2], [1], [0]]
    with pytest.raises(ValueError):
        fusion(sizes, tb, comm, cycle_s=0)


def test_fusion_buffers_hold_up_to_the_threshold_in_order():
    sizes = [4, 4, 10, 4, 2]
    assert pack([0, 1, 2, 3, 4], sizes, 8) == [[0, 1], [2], [3, 4]]  # 10 > 8 goes alone
    assert pack([4, 3, 1], sizes, 100) == [[4, 3, 1]]
    assert pack([], sizes, 8) == []
