"""Communication scheduling (testbed/workloads/commsched.py): the pieces, the credit's
picks, and the iteration model against timings worked out by hand."""
import pytest

from testbed.workloads.commsched import (
    CREDIT_PARAMS,
    PARTITION_PARAMS,
    Piece,
    Schedule,
    iteration,
    pick,
    pieces,
    scaled_bytes,
)
from testbed.workloads.fusion import CommModel


def test_pieces_cut_each_gradient_input_side_first():
    assert pieces([8, 20], None) == [Piece(0, 0, 8), Piece(1, 0, 20)]
    assert pieces([8, 20], 8) == [Piece(0, 0, 8), Piece(1, 0, 8), Piece(1, 8, 8),
                                  Piece(1, 16, 4)]
    # a partition that is not a multiple of 4 bytes is cut to one (whole parameters)
    assert pieces([12], 6) == [Piece(0, 0, 4), Piece(0, 4, 4), Piece(0, 8, 4)]


def test_the_credit_lets_pieces_go_in_priority_order_and_none_passes_one_that_waits():
    sizes = [10, 10, 30, 10]
    assert pick([3, 1, 0], 0, 20, sizes) == [0, 1]      # highest first, within the credit
    assert pick([2, 3], 0, 20, sizes) == [2]            # nothing out: one goes, too big or not
    assert pick([2, 3], 10, 20, sizes) == []            # 3 fits but does not pass 2
    assert pick([0, 1], 10, 0, sizes) == []             # TicTac: one at a time
    assert pick([], 0, 20, sizes) == []


def test_the_papers_defaults_take_as_long_on_the_wire_at_the_link_rate():
    # 8M parameters (32 MB) at 100 Gb/s are 2.56 ms: 6.4 KB at 20 Mb/s
    assert scaled_bytes(PARTITION_PARAMS, 20) == 6_400
    assert scaled_bytes(CREDIT_PARAMS, 20) == 12_800
    assert scaled_bytes(PARTITION_PARAMS, 100_000) == 32_000_000


def test_messages_pay_their_start_up_one_after_the_other():
    """Every gradient ready at once, no compute: four messages of a + b M back to back,
    whether handed over at once (FIFO) or one at a time (TicTac): one Gloo group's
    allreduces share its connections step by step, so their start-ups add up."""
    comm = CommModel(a=0.01, b=1e-6)
    sizes = [100_000] * 4
    for name in ("fifo", "tictac"):
        assert iteration(Schedule(name), sizes, [0.0] * 4, [0.0] * 4, comm) == pytest.approx(
            4 * 0.11), name
    # ByteScheduler's pieces each pay it: 8 pieces of 50 KB
    assert iteration(Schedule("bytescheduler", partition=50_000, credit=10**9), sizes,
                     [0.0] * 4, [0.0] * 4, comm) == pytest.approx(8 * 0.06)


def test_priority_lets_the_next_forward_overlap_the_last_layers_gradient():
    """Two layers: the input one small with most of the compute, the output one big (2 s on
    the wire). Backward makes layer 1 at 0.7 s (after 0.5 s of forward) and layer 0 at
    1.5 s. FIFO sends layer 0 after all of layer 1 (0.7-2.7, then 2.7-2.8): 2.8 s a step.
    ByteScheduler's pieces of 0.25 s let layer 0 pass at the first boundary after it is
    ready, and the next forward of layer 0 (0.4 s) runs beside the rest of layer 1: in the
    steady state the wire is never idle and a step takes 2.1 s of messages plus the 0.3 s of
    compute they cannot hide (layer 1's forward and backward between its update and its
    gradient): 2.4 s."""
    comm = CommModel(a=0.0, b=1e-6)
    sizes, fwd, bwd = [100_000, 2_000_000], [0.4, 0.1], [0.8, 0.2]
    assert iteration(Schedule("fifo"), sizes, fwd, bwd, comm) == pytest.approx(2.8)
    assert iteration(Schedule("bytescheduler", partition=250_000, credit=0), sizes, fwd,
                     bwd, comm) == pytest.approx(2.4)
    # TicTac cannot preempt: layer 1 went whole before layer 0 was ready
    assert iteration(Schedule("tictac"), sizes, fwd, bwd, comm) == pytest.approx(2.8)


def test_a_negotiation_round_delays_every_decision():
    comm = CommModel(a=0.0, b=1e-6)
    sizes = [100_000]
    base = iteration(Schedule("tictac"), sizes, [0.1], [0.2], comm)
    assert iteration(Schedule("tictac"), sizes, [0.1], [0.2], comm,
                     negotiation_s=0.05) == pytest.approx(base + 0.05)


def test_an_unknown_schedule_is_refused():
    with pytest.raises(ValueError, match="unknown schedule"):
        Schedule("p3")


def test_emulated_compute_is_shared_by_multiply_accumulates():
    """The vgg model: a 3x3 convolution's outputs times 9 x its input channels, a linear
    layer's outputs times its inputs; the convolutions do most of the work, the linear
    layers hold most of the parameters."""
    import torch

    from testbed.workloads.layerwise import layer_macs, layers
    from testbed.workloads.models import build
    model = build("vgg", 256, 2)
    macs = layer_macs(model, torch.zeros(2, 64))
    assert macs == [2 * 32 * 64 * 9, 2 * 32 * 64 * 9 * 32, 2 * 64 * 16 * 9 * 32,
                    2 * 64 * 16 * 9 * 64, 2 * 256 * 256, 2 * 256 * 256, 2 * 10 * 256]
    params = [sum(p.numel() for p in m.parameters(recurse=False)) for m in layers(model)]
    assert sum(macs[:4]) / sum(macs) > 0.9 and sum(params[4:]) / sum(params) > 0.6
