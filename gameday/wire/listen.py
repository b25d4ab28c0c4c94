"""Listen addresses, as the agent and the halt webhook take them (``--listen HOST:PORT``)."""

import ipaddress

from gameday.errors import InvalidInput

__all__ = ["is_loopback", "parse_listen"]


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:7777`` for IPv6; an empty host means all interfaces)."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise InvalidInput(f"--listen {value!r} must be HOST:PORT, e.g. 127.0.0.1:7777")
    host = host.strip("[]") if host.startswith("[") else host
    return host or "0.0.0.0", int(port_text)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
