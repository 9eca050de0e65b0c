"""Whether an IP address is one the product may call on a user's behalf: the http_request tool
(`tools/builtin/http_request.py`), webhooks (`runs/webhooks.py`) and Slack notifications
(`governance/alerts.py`) all ask here, so they cannot drift apart.

`ipaddress`'s `is_global` alone is not enough: several IPv6 forms carry an IPv4 address inside
them, and a host that translates or tunnels them (a NAT64 gateway, a 6to4 relay, a dual-stack
kernel for the IPv4-compatible and mapped forms) delivers the packet to that IPv4 address.
`is_global` calls `::127.0.0.1`, `64:ff9b::7f00:1` or `2002:7f00:1::` public, because the
IPv6 address itself is; the address they reach is loopback. So the embedded IPv4 address is
checked too, whatever form carries it.
"""

from __future__ import annotations

import ipaddress
import socket

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Forms whose last 32 bits are the IPv4 address reached.
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # RFC 4291 (deprecated, still routed by some)
IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")  # RFC 2765 (SIIT)
NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052
# RFC 8215's local-use NAT64 prefix: where the IPv4 address sits depends on the prefix length
# each operator picks, so it cannot be read out; it is never globally reachable anyway.
NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")


def embedded_ipv4_addresses(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (mapped, compatible, translated, NAT64,
    6to4, both ends of Teredo): the addresses a packet to it may end up at."""
    found: list[ipaddress.IPv4Address] = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if ip in IPV4_COMPATIBLE or ip in IPV4_TRANSLATED or ip in NAT64_WELL_KNOWN:
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    return found


def _is_global(ip: IPAddress) -> bool:
    return ip.is_global and not ip.is_multicast


def is_public_address(address: str) -> bool:
    """True when `address` (an IPv4 or IPv6 literal, an IPv6 zone `%eth0` allowed) and every
    IPv4 address embedded in it are public unicast addresses: not private, loopback,
    link-local, multicast, reserved or otherwise special. Not an address at all: ValueError."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv4Address):
        return _is_global(ip)
    if ip in NAT64_LOCAL_USE:
        return False
    embedded = embedded_ipv4_addresses(ip)
    if ip.ipv4_mapped is not None:
        # A mapped address is the IPv4 address itself; `is_global` of the IPv6 form is
        # not meaningful for it.
        return all(_is_global(inner) for inner in embedded)
    return _is_global(ip) and all(_is_global(inner) for inner in embedded)


class AddressRefused(Exception):
    """A host that may not be called: `permanent` when it resolves to an address that is not
    public, not when its name did not resolve (that may pass)."""

    def __init__(self, message: str, *, permanent: bool):
        super().__init__(message)
        self.permanent = permanent


def public_address(host: str, port: int) -> str:
    """The address to connect to, once every address the name resolves to is checked
    (a private one only where HIERARCH_HTTP_ALLOW_PRIVATE says); else AddressRefused."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise AddressRefused(
            f"cannot resolve host {host}: {getattr(exc, 'strerror', None) or exc}",
            permanent=False,
        ) from None
    addresses = [info[4][0] for info in infos]
    if not getattr(settings, "HIERARCH_HTTP_ALLOW_PRIVATE", False):
        for address in addresses:
            if not is_public_address(address):
                raise AddressRefused(
                    f"host {host} resolves to {address}, a private, loopback or reserved "
                    "address (set HIERARCH_HTTP_ALLOW_PRIVATE to call one)",
                    permanent=True,
                )
    return addresses[0]
