"""Which addresses a process tree listens on (Linux's /proc), for the loopback-only tests."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

__all__ = ["descendants", "listening_addresses"]

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


def descendants(pid: int) -> set[int]:
    """Every live process under ``pid`` (children started in sessions of their own included)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                # The command name may hold spaces and parentheses: ppid follows the last ')'.
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _address(hex_address: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1]), int(port, 16)
    # IPv6: four 32-bit words, each in the host's (little-endian) order.
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    v6 = ipaddress.IPv6Address(words)
    return (v6.ipv4_mapped or v6), int(port, 16)


def listening_addresses(pids: set[int]) -> dict[int, set[str]]:
    """Port -> the addresses the given processes' TCP sockets listen on there."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found: dict[int, set[str]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == _LISTEN and fields[9] in inodes:
                address, port = _address(fields[1])
                found.setdefault(port, set()).add(str(address))
    return found
