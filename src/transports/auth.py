"""The cluster's shared secret on the server ports that ask for it (bookies, the gRPC endpoint,
the HTTP admin port, the channel between stream storage servers): the one constant-time check of
what a client presents, the bearer form of it on HTTP and gRPC, and the refusals' log lines.

    is_secret(presented, secret)             the bytes themselves (bookies, the peer channel)
    is_bearer(header_value, secret)          "Bearer <secret>" (HTTP Authorization, gRPC metadata)

A refused client is logged once per host (RefusalLog): a scraper or a peer that was never given
the secret retries forever, and one line per try would bury the log. Every refusal is counted.
"""

from __future__ import annotations

import hmac
import logging

BEARER_PREFIX = b"Bearer "
# Hosts whose first refusal has been logged; past this many, refusals are only counted.
REFUSAL_LOGGED_HOSTS_MAX = 1024


def is_secret(presented: bytes, secret: bytes) -> bool:
    """Whether `presented` is `secret`, in time that does not depend on where they differ."""
    return hmac.compare_digest(presented, secret)


def is_bearer(value: bytes | str | None, secret: bytes) -> bool:
    """Whether an Authorization value is "Bearer <secret>" (the scheme's case as RFC 6750 writes it)."""
    if value is None:
        return False
    if isinstance(value, str):
        value = value.encode("latin-1", errors="replace")
    return is_secret(value, BEARER_PREFIX + secret)


def bearer(secret: bytes) -> str:
    """The Authorization value a client sends: "Bearer <secret>"."""
    return (BEARER_PREFIX + secret).decode("latin-1")


def peer_host(stream) -> str:
    """The address of a trio stream's peer, under TLS too (for refusals' log lines)."""
    transport = getattr(stream, "transport_stream", stream)
    try:
        return transport.socket.getpeername()[0]
    except (AttributeError, OSError):
        return "a client"


class RefusalLog:
    """Counts refused clients of one port and logs the first refusal of each host."""

    def __init__(self, logger: logging.Logger, what: str) -> None:
        self._log = logger
        self.what = what                            # names the port in the log lines
        self._logged_hosts: set[str] = set()       # at most REFUSAL_LOGGED_HOSTS_MAX
        self.count = 0

    def refused(self, host: str, reason: str) -> None:
        self.count += 1
        if host in self._logged_hosts or len(self._logged_hosts) >= REFUSAL_LOGGED_HOSTS_MAX:
            return
        self._logged_hosts.add(host)
        self._log.warning("%s: refused %s: %s (further refusals of this host are counted, not logged)",
                          self.what, host, reason)
