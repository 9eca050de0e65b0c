SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
HASH := $(shell sha1sum pyproject.toml | cut -c1-12)
BASE_STAMP := $(VENV)/.base-$(HASH)
DEV_STAMP := $(VENV)/.dev-$(HASH)
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=

# The embedded default: SQLite in var/, the in-process executor, plain HTTP on loopback.
RUN_ENV = DEBUG=0 SECRET_KEY="$$(cat var/secret_key)" ALLOWED_HOSTS=127.0.0.1,localhost \
	SECURE_SSL_REDIRECT=0 SESSION_COOKIE_SECURE=0 CSRF_COOKIE_SECURE=0 SECURE_HSTS_SECONDS=0 \
	SECURE_HSTS_INCLUDE_SUBDOMAINS=0 SECURE_HSTS_PRELOAD=0 \
	HIERARCH_EXECUTOR=$${HIERARCH_EXECUTOR:-inline} \
	HIERARCH_BASE_URL=$${HIERARCH_BASE_URL:-http://$(HOST):$(PORT)}

# Tests: a throwaway key; plain HTTP for the test client and the live server.
TEST_ENV = SECRET_KEY="$${SECRET_KEY:-test-only-key-$$(printf 'k%.0s' {1..50})}" \
	SECURE_SSL_REDIRECT=0 SESSION_COOKIE_SECURE=0 CSRF_COOKIE_SECURE=0 SECURE_HSTS_SECONDS=0

.PHONY: run test lint format install install-dev clean

run: $(BASE_STAMP) var/secret_key
	@$(RUN_ENV) $(BIN)/python manage.py migrate --noinput -v0
	@$(RUN_ENV) $(BIN)/python manage.py collectstatic --noinput -v0
	@$(RUN_ENV) $(BIN)/python manage.py setup_demo
	@# manage.py commands beside the server read its address here (HIERARCH_BASE_URL).
	@$(RUN_ENV) printenv HIERARCH_BASE_URL > var/base_url
	@echo "Hierarch console: $$(cat var/base_url)/admin/  (Ctrl-C stops it)"
	@$(RUN_ENV) exec $(BIN)/daphne -b $(HOST) -p $(PORT) config.asgi:application

test: $(DEV_STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

format: $(DEV_STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

install: $(BASE_STAMP)
install-dev: $(DEV_STAMP)

# Installing: wheels only where PyPI has them (--prefer-binary: nothing is compiled), with
# pip's progress shown; uv does the same several times faster and is used when it is on PATH.
PIP_INSTALL = $(if $(shell command -v uv),uv pip install --python $(BIN)/python,$(BIN)/pip install --disable-pip-version-check --prefer-binary)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(BASE_STAMP): pyproject.toml | $(BIN)/python
	@echo "Installing Hierarch's dependencies into $(VENV) (once, and again when pyproject.toml changes; about 2 minutes)..."
	$(PIP_INSTALL) -e .
	rm -f $(VENV)/.base-*
	touch $@

$(DEV_STAMP): pyproject.toml | $(BIN)/python
	@echo "Installing Hierarch's dependencies and test tools into $(VENV) (once, and again when pyproject.toml changes; about 3 minutes)..."
	$(PIP_INSTALL) -e ".[dev]"
	rm -f $(VENV)/.base-* $(VENV)/.dev-*
	touch $(BASE_STAMP) $@

var/secret_key:
	mkdir -p var
	$(PYTHON) -c "import secrets; print(secrets.token_urlsafe(50))" > $@
	chmod 600 $@

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache
