"""``rocmlock.channel.serve`` takes many connections at once (issue 43: a one-second stall in every pack benchmark).

socketserver listens with a backlog of 5: when more clients connect at once than the accepting thread takes in
time, Linux drops their SYNs and each waits for TCP's retransmission, one second later (RFC 6298's initial RTO).
``rocmlock pack`` fetches 8 packages at once: on a loaded machine the server's 120 MB took 1.05 s to arrive
instead of 0.15 s.
"""

from __future__ import annotations

import select
import socket
from pathlib import Path

from rocmlock.channel.serve import make_server

CLIENTS = 32


def test_connections_beyond_socketservers_backlog_of_5_complete_before_any_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "channel").mkdir()
    server = make_server(tmp_path / "channel", "c", "u", "p")  # listening, and nothing accepts yet
    clients = [socket.socket() for _ in range(CLIENTS)]
    try:
        for sock in clients:
            sock.setblocking(False)
            sock.connect_ex(server.server_address)
        # The kernel completes a handshake that fits the listen queue at once; a dropped SYN waits for its retry.
        _, connected, _ = select.select([], clients, [], 0.5)
        assert len(connected) == CLIENTS
        assert all(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 for sock in connected)
    finally:
        for sock in clients:
            sock.close()
        server.server_close()
