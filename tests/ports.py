"""Ports for the servers the tests start (Ray heads, MLflow, moto, dashboards).

A port found free by binding port 0 comes from the kernel's ephemeral range, the same
range every outgoing connection and every `bind(0)` of Ray's own processes draws from:
between the probe and the server's bind another process could take it. These ports come
from below that range, where the kernel never hands one out by itself, so a port found
free here stays free until the server that was given it binds it (or until another
program asks for that very number). One port is never given twice in a run."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_GIVEN: set[int] = set()
_LOWEST = 10_000


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def free_port() -> int:
    """A loopback TCP port below the ephemeral range that nothing listens on now."""
    top = _ephemeral_start()
    candidates = random.Random().sample(range(_LOWEST, top), k=min(200, top - _LOWEST))
    for port in candidates:
        if port in _GIVEN:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    raise RuntimeError(f"no free port between {_LOWEST} and {top}")
