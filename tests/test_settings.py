"""Settings read the environment and fail loudly on what they cannot read."""

from __future__ import annotations

import subprocess

import pytest

from tests.settings_process import settings_printed

pytestmark = pytest.mark.smoke


def load_settings(**env: str) -> subprocess.CompletedProcess:
    return settings_printed(
        "settings.DATABASES['default']['ENGINE']",
        "settings.HIERARCH_EXECUTOR",
        "settings.CHANNEL_LAYERS['default']['BACKEND']",
        without={"DATABASE_URL", "DEBUG"},
        **env,
    )


def test_it_defaults_to_sqlite_inline_and_in_memory_layers(tmp_path):
    result = load_settings(HIERARCH_VAR_DIR=str(tmp_path), REDIS_URL="")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "django.db.backends.sqlite3",
        "inline",
        "channels.layers.InMemoryChannelLayer",
    ]


def test_it_reads_postgres_and_redis_urls():
    result = load_settings(
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/hierarch",
        REDIS_URL="redis://127.0.0.1:6379/0",
        HIERARCH_EXECUTOR="celery",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "django.db.backends.postgresql",
        "celery",
        "channels_redis.core.RedisChannelLayer",
    ]


OTEL_NAMES = (
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_SERVICE_NAME",
)


@pytest.mark.parametrize(
    ("env", "endpoint", "rate"),
    [
        ({}, "", "1.0"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://tempo:4318/"},
            "http://tempo:4318/v1/traces",
            "1.0",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://tempo:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://cloud.langfuse.com/api/public/otel/v1/traces",
                "OTEL_TRACES_SAMPLER_ARG": "0.1",
            },
            "https://cloud.langfuse.com/api/public/otel/v1/traces",
            "0.1",
        ),
    ],
)
def test_it_reads_the_trace_export_from_opentelemetry_names(env, endpoint, rate, tmp_path):
    result = settings_printed(
        "repr(settings.HIERARCH_TRACING['ENDPOINT'])",
        "settings.HIERARCH_TRACING['SAMPLING_RATE']",
        without=OTEL_NAMES,
        HIERARCH_VAR_DIR=str(tmp_path),
        **env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [repr(endpoint), rate]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"HIERARCH_EXECUTOR": "threads"},
            "HIERARCH_EXECUTOR='threads' is not one of inline, celery",
        ),
        ({"DEBUG": "maybe"}, "DEBUG='maybe' is not a boolean"),
        ({"DATABASE_URL": "mysql://root@localhost/x"}, "use postgres:// or sqlite://"),
        ({"HIERARCH_IMPORT_MAX_BYTES": "5MB"}, "HIERARCH_IMPORT_MAX_BYTES='5MB' is not an integer"),
        ({"SECRET_KEY": "", "DEBUG": "0"}, "SECRET_KEY is not set"),
        ({"OTEL_TRACES_SAMPLER_ARG": "2"}, "OTEL_TRACES_SAMPLER_ARG=2.0 is not a rate between"),
    ],
)
def test_it_refuses_a_setting_it_cannot_read(env, message, tmp_path):
    result = load_settings(HIERARCH_VAR_DIR=str(tmp_path), **env)  # no var/secret_key there
    assert result.returncode != 0
    assert message in result.stderr


def secret_key_with(**env: str) -> subprocess.CompletedProcess:
    return settings_printed("settings.SECRET_KEY", without={"SECRET_KEY", "DEBUG"}, **env)


def test_commands_beside_make_run_use_the_key_it_keeps(tmp_path):
    """`manage.py` in another terminal signs and decrypts as `make run`'s server does."""
    kept = "kept-by-make-run-" + "k" * 50
    (tmp_path / "secret_key").write_text(kept + "\n")

    result = secret_key_with(HIERARCH_VAR_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == kept

    explicit = "from-the-environment-" + "e" * 40  # an explicit SECRET_KEY still wins
    result = secret_key_with(HIERARCH_VAR_DIR=str(tmp_path), SECRET_KEY=explicit)
    assert result.stdout.strip() == explicit, result.stderr


@pytest.mark.parametrize(
    "names",
    [
        "[settings.AXES_LOCKOUT_CALLABLE]",
        "[settings.AXES_CLIENT_IP_CALLABLE]",
        "[settings.AXES_LOCKOUT_PARAMETERS]",
        "settings.REST_FRAMEWORK['DEFAULT_PARSER_CLASSES']",
    ],
)
def test_every_setting_that_names_a_callable_imports_first_in_a_new_process(names):
    # Such a name is imported by whichever module asks first; an import circle (a parser class
    # in a module that imports DRF's views) shows only when it is the first, in a new process.
    found = settings_printed(
        f"[import_string(name) for name in {names}]",
        preamble="from django.utils.module_loading import import_string",
    )
    assert found.returncode == 0, found.stderr[-800:]
