"""The one private-address check of the http_request tool and webhooks: IPv6 forms that carry
an IPv4 address inside are judged by the address they reach."""

from __future__ import annotations

import pytest

from governance.addresses import is_public_address
from runs.webhooks import WebhookRefused, webhook_url_check

pytestmark = pytest.mark.smoke

# Each reaches 127.0.0.1 (or another inside address) through a translator or a tunnel, while
# `ipaddress`'s `is_global` calls several of them public.
EMBEDDING_AN_INSIDE_ADDRESS = [
    "::127.0.0.1",  # IPv4-compatible
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:0:7f00:1",  # IPv4-translated (SIIT)
    "64:ff9b::7f00:1",  # NAT64, the well-known prefix
    "64:ff9b::a01:203",  # NAT64 to 10.1.2.3
    "64:ff9b::a9fe:a9fe",  # NAT64 to 169.254.169.254, the cloud metadata address
    "64:ff9b:1::7f00:1",  # NAT64, the local-use prefix
    "64:ff9b:1:7f00:0:100::",  # the same, as a /48 prefix embeds it
    "2002:7f00:1::",  # 6to4
    "2002:c0a8:1::1",  # 6to4 of 192.168.0.1
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
    "2001::7f00:1",  # Teredo, whatever its ends
]


@pytest.mark.parametrize("address", EMBEDDING_AN_INSIDE_ADDRESS)
def test_an_ipv6_address_carrying_an_inside_ipv4_address_is_not_public(address):
    assert not is_public_address(address)


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "2606:4700::1111", "2a00:1450:4001:82b::200e", "::ffff:8.8.8.8", "2002:808:808::"],
)
def test_public_addresses_and_forms_carrying_a_public_one_are_public(address):
    assert is_public_address(address)


@pytest.mark.parametrize(
    "address", ["127.0.0.1", "10.0.0.1", "::1", "::", "fe80::1%eth0", "ff02::1", "224.0.0.1"]
)
def test_private_loopback_link_local_and_multicast_addresses_are_not_public(address):
    assert not is_public_address(address)


@pytest.mark.parametrize("address", ["::127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::"])
def test_a_webhook_url_at_an_embedded_loopback_address_is_refused(settings, address):
    settings.HIERARCH_WEBHOOKS = {**settings.HIERARCH_WEBHOOKS, "ALLOW_PRIVATE": False}
    with pytest.raises(WebhookRefused, match="private, loopback"):
        webhook_url_check(f"http://[{address}]:9/hook")
