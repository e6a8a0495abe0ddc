"""Which rank a failed job names: the one that failed by its own fault, then the earliest."""
import os

from testbed.experiments.trainers.ranks import first_failed as first_of


def first_failed(job_dir, ranks):
    """The rank named among `ranks` of one job."""
    return first_of([(job_dir, rank) for rank in ranks])[1]


def write(job_dir, rank, text, mtime):
    path = job_dir / f"rank{rank}.error"
    path.write_text(text)
    os.utime(path, (mtime, mtime))


def test_a_timeout_is_named_before_the_peers_it_disconnected(tmp_path):
    # a partition: rank 3 times out and Gloo closes its connections; rank 2's error file,
    # written a millisecond earlier, only says its peer went away
    write(tmp_path, 2, "RuntimeError: [pair.cc:553] Connection closed by peer [10.0.0.13]",
          100.000)
    write(tmp_path, 3, "RuntimeError: [pair.cc:446] Timed out waiting 8000ms for recv",
          100.001)
    assert first_failed(tmp_path, [2, 3]) == 3


def test_otherwise_the_earliest_error(tmp_path):
    write(tmp_path, 0, "RuntimeError: injected fault at iteration 2", 50.0)
    write(tmp_path, 1, "RuntimeError: injected fault at iteration 2", 40.0)
    assert first_failed(tmp_path, [0, 1, 2]) == 1
    write(tmp_path, 0, "Connection reset by peer", 30.0)
    write(tmp_path, 1, "Connection closed by peer", 20.0)
    assert first_failed(tmp_path, [0, 1]) == 1  # only consequences: the earliest
    # a rank that died without a word (killed) comes after every rank that failed by its
    # own fault, before those that only say it went away
    write(tmp_path, 3, "RuntimeError: Timed out", 60.0)
    assert first_failed(tmp_path, [0, 1, 2, 3]) == 3
    assert first_failed(tmp_path, [0, 1, 2]) == 2


def test_a_failure_that_only_blames_a_peer_waits_for_the_peer():
    from testbed.experiments.trainers.ranks import FAILURE_GRACE_S, settled
    assert not settled([True], running=True, waited_s=0.0)  # the peer may still be exiting
    assert settled([True, False], running=True, waited_s=0.0)  # one failed on its own
    assert settled([True], running=False, waited_s=0.0)  # nobody left to wait for
    assert settled([True], running=True, waited_s=FAILURE_GRACE_S)  # not forever
