"""Test clients signed in as a persona."""

from __future__ import annotations

from typing import Any


def signed_in(client_class: Any, user: Any) -> Any:
    """A new client of `client_class` (Django's Client or APIClient) signed in as `user`."""
    client = client_class()
    client.force_login(user)
    return client
