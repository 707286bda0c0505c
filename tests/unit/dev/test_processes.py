"""Free ports for local servers come from below the ephemeral range, where no client's outgoing
connection can take one between its choice and the server's bind."""

from __future__ import annotations

import socket

from mirrorflow_dev import processes


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    ports = processes.free_ports(20)

    assert len(set(ports)) == 20
    assert all(10_000 <= p < processes._ephemeral_start() for p in ports)
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
