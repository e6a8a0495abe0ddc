"""A worker's own TCP connections, read from TCP_INFO: bytes acknowledged or written, segments, and
the congestion window and slow-start threshold of the busiest connection."""
import socket

from testbed.workloads.sockets import mark_sockets, socket_fds, tcp_sent, tcp_window, tcp_written


def test_connections_are_found_marked_and_counted():
    before = socket_fds()
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    try:
        fds = socket_fds() - before
        assert {server.fileno(), client.fileno(), peer.fileno()} <= fds
        assert mark_sockets(fds, 10) == 3  # the listening socket is TCP too
        assert client.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) == 10 << 2
        client.sendall(b"x" * 100_000)
        got = 0
        while got < 100_000:
            got += len(peer.recv(65536))
        payload, segs = tcp_sent({client.fileno()})
        assert payload == 100_001 and segs >= 2  # the SYN is acknowledged too
        cwnd, ssthresh = tcp_window(fds)
        # the client's connection sent the most; no loss or mark on loopback
        assert cwnd >= 10 and ssthresh is None
        assert tcp_window(set()) == (0, None)
    finally:
        for s in (client, peer, server):
            s.close()


def test_written_bytes_count_what_is_still_queued():
    """A peer that does not read fills its window, and the rest waits in the sender's
    queue: what was written counts it, what was acknowledged does not yet."""
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    try:
        client.setblocking(False)
        written = 0
        try:
            while True:
                written += client.send(b"x" * 65536)
        except BlockingIOError:
            pass
        acked, _ = tcp_sent({client.fileno()})
        total, _ = tcp_written({client.fileno(), server.fileno()})  # a listener adds nothing
        assert total == written + 1  # the SYN, as above
        assert acked < total
    finally:
        for s in (client, peer, server):
            s.close()
