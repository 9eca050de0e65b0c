"""Requests to decide: an agent of Acme and one of Globex, each with a run paused on a person."""

from __future__ import annotations

import pytest

from tests.factories import EntityFactory, approval_request, paused_run


@pytest.fixture
def researcher(acme):
    return EntityFactory(workspace=acme, name="researcher")


@pytest.fixture
def mailer(globex):
    return EntityFactory(workspace=globex, name="mailer")


@pytest.fixture
def acme_run(researcher):
    return paused_run(researcher)


@pytest.fixture
def globex_run(mailer):
    return paused_run(mailer)


@pytest.fixture
def asked(acme_run):
    """A pending BEFORE_TOOL_CALL request of Acme's researcher."""
    return approval_request(acme_run)


@pytest.fixture
def asked_globex(globex_run):
    return approval_request(globex_run, payload={"to": "ceo@globex.example"})
