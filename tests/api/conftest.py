"""The API tests, with the personas of tests/conftest.py: dave approves in Acme (he decides its
requests), alice designs and bob views there (they see its requests and may not decide them),
charlie is in Globex (Acme's requests do not exist for him). Requests are made as the engine
leaves them (tests/api/factories.py)."""

from __future__ import annotations

import uuid

import pytest
from rest_framework.test import APIClient

from approvals.models import Approval
from tests.api.factories import approval_for
from tests.factories import EntityFactory, paused_run


@pytest.fixture(autouse=True)
def _throttle_counts_of_this_test_only(settings):
    # The throttle counts requests in the cache (Redis with REDIS_URL): a cache of the test's
    # own, so no earlier run's counts carry over.
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": f"api-test-{uuid.uuid4()}",
        }
    }


@pytest.fixture
def api() -> APIClient:
    return APIClient()


@pytest.fixture
def publisher(acme):
    return EntityFactory(workspace=acme, name="publisher")


@pytest.fixture
def acme_request(publisher) -> Approval:
    return approval_for(paused_run(publisher))


@pytest.fixture
def globex_request(globex) -> Approval:
    return approval_for(paused_run(EntityFactory(workspace=globex, name="globex_poster")))
