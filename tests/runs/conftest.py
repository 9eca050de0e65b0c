"""Fixtures for the run tests: a fake OpenAI-compatible server on loopback."""

from __future__ import annotations

import pytest

from tests.factories import UserFactory, grant
from tests.fakes.openai_server import FakeOpenAIServer


@pytest.fixture
def openai_server():
    """A fresh fake `POST /v1/chat/completions` on 127.0.0.1; script it with `reply_*`."""
    server = FakeOpenAIServer().start()
    yield server
    server.stop()


@pytest.fixture
def olive(acme):
    """Olive operates in Acme: she starts runs."""
    return grant(UserFactory(username="olive"), acme, "operator")
