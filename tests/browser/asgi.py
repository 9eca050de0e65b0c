"""The ASGI application as `make run` serves it (daphne, Channels, the inline executor), with
static files from the finders (tests never run collectstatic) and the tests' password hasher."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from django.conf import settings  # noqa: E402

# The test personas' passwords are hashed with MD5 to keep the suite fast (tests/conftest.py).
settings.PASSWORD_HASHERS = [
    *settings.PASSWORD_HASHERS,
    "django.contrib.auth.hashers.MD5PasswordHasher",
]
settings.STORAGES = {
    **settings.STORAGES,
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from config.asgi import application as hierarch  # noqa: E402

application = ASGIStaticFilesHandler(hierarch)
