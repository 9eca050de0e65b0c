"""Webhooks: when a root run started with `execution_options.webhook_url` ends (COMPLETED,
FAILED or CANCELLED), its run document (seed 000 §7.2, `runs.selectors.run_document`) is
POSTed there as JSON, signed, and retried with exponential backoff until a 2xx answer or
HIERARCH_WEBHOOKS["MAX_ATTEMPTS"]; every attempt is a `WebhookDelivery` row.

When a run of its trace (the root or any run below it) goes BLOCKED, the root's document is
POSTed too, as `run.needs_attention`: its `needs_attention` says which run waits, why, and
where to act. Once per block: the delivery's id is made from the run's BLOCKED event (a run
blocked, resumed and blocked again is told twice; the same block never).

Each POST carries:

- `X-Hierarch-Signature: sha256=<hex>`: HMAC-SHA256 of the raw body with the workspace's
  webhook secret (kept in the credential vault as `hierarch-webhook-secret`, made on first
  need; a workspace admin reads it at GET /api/v1/workspaces/{id or slug}/webhook-secret);
- `X-Hierarch-Event` (`run.completed`, `run.failed`, `run.cancelled`,
  `run.needs_attention`), `X-Hierarch-Delivery`
  (the same for every attempt of one delivery: a receiver drops duplicates by it),
  `X-Hierarch-Attempt` and `X-Hierarch-Timestamp` (Unix seconds of the attempt).

A URL must be http(s), carry no user name or password, and resolve only to public addresses
unless HIERARCH_WEBHOOKS["ALLOW_PRIVATE"] is set: checked when the run starts and again at
every attempt, against the address actually connected to (the connection is pinned to the
checked address), so a DNS answer that changes in between cannot reach an internal service.

The database is the truth: the first attempt's row is written in the transaction that ends
the run, and a worker claims a row before it sends. The hint to send (a Celery task with
HIERARCH_EXECUTOR=celery, else a timer thread) is sent after commit; a hint that was lost is
found again by `webhook_sweep` (with the run sweeper, `runs.tasks.sweep_runs`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import socket
import time
import uuid
from datetime import timedelta
from typing import Any, Protocol

import httpx
from django.conf import settings
from django.db import IntegrityError, close_old_connections, connections, transaction
from django.db.models import Q
from django.utils import timezone

from entities.models import Workspace
from governance.addresses import is_public_address
from governance.models import SecretKind
from governance.vault import SecretNotFound, secret_resolve, secret_set
from runs import background
from runs.models import Run, RunEvent, WebhookDelivery, WebhookStatus
from runs.selectors import run_document

log = logging.getLogger(__name__)

SECRET_NAME = "hierarch-webhook-secret"  # noqa: S105 - the vault name, not a value
MAX_URL_LENGTH = 2048
USER_AGENT = "Hierarch-Webhooks/1"
EVENTS = {"COMPLETED": "run.completed", "FAILED": "run.failed", "CANCELLED": "run.cancelled"}
NEEDS_ATTENTION = "run.needs_attention"
# The ids of `run.needs_attention` deliveries are made from the block they tell of.
_BLOCK_IDS = uuid.UUID("6a0e5f2c-4d3b-5b8e-9f61-2c7d1e0b9a47")
# A delivery whose hint was lost is sent again by the sweep this long after it was due.
SWEEP_GRACE = timedelta(seconds=10)
# A countdown message longer than this is left to the sweep (see DESIGN.md: long ETA
# messages are redelivered by Redis past its visibility timeout).
LONGEST_HINT_SECONDS = 600.0


class WebhookRefused(ValueError):
    """A webhook URL that may not be called; the message says why, naming the host only."""


def _config() -> dict[str, Any]:
    return settings.HIERARCH_WEBHOOKS


# -- the URL ------------------------------------------------------------------------------------


def _parsed(raw: str) -> tuple[httpx.URL, str]:
    if not isinstance(raw, str) or not raw.strip():
        raise WebhookRefused("must be an absolute http:// or https:// URL")
    if len(raw) > MAX_URL_LENGTH:
        raise WebhookRefused(f"is {len(raw)} characters; at most {MAX_URL_LENGTH}")
    try:
        url = httpx.URL(raw.strip())
        host = url.raw_host.decode("ascii").lower()
    except (httpx.InvalidURL, UnicodeError, TypeError) as exc:
        raise WebhookRefused(f"is not a valid URL: {exc}") from None
    if url.scheme not in ("http", "https") or not host:
        raise WebhookRefused("must be an absolute http:// or https:// URL")
    if url.port == 0:
        raise WebhookRefused("port 0 cannot be called")
    if url.userinfo:
        raise WebhookRefused(
            "must not carry a user name or password; the receiver checks the "
            "X-Hierarch-Signature header instead"
        )
    return url, host


def _resolve(url: httpx.URL, host: str) -> str:
    """The address to connect to, once every address the host resolves to is checked."""
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise WebhookRefused(f"host {host} does not resolve: {why}") from None
    addresses = [info[4][0] for info in infos]
    if not _config()["ALLOW_PRIVATE"]:
        for address in addresses:
            if not is_public_address(address):
                raise WebhookRefused(
                    f"host {host} resolves to {address}, a private, loopback, link-local or "
                    "reserved address (HIERARCH_WEBHOOKS_ALLOW_PRIVATE allows them)"
                )
    return addresses[0]


def webhook_url_check(raw: str) -> str:
    """`raw` as a webhook URL a run may be started with, or WebhookRefused saying why."""
    url, host = _parsed(raw)
    _resolve(url, host)
    return str(url)


# -- the secret ---------------------------------------------------------------------------------


def webhook_secret(workspace_id: int) -> str:
    """The workspace's webhook signing secret, made (and kept in the vault) on first need."""
    try:
        return secret_resolve(workspace_id, SECRET_NAME)
    except SecretNotFound:
        pass
    try:
        with transaction.atomic():
            secret_set(
                workspace=Workspace.objects.get(pk=workspace_id),
                name=SECRET_NAME,
                value="whsec_" + secrets.token_urlsafe(32),
                kind=SecretKind.GENERIC,
            )
    except IntegrityError:
        pass  # made at the same moment elsewhere: that one stands
    return secret_resolve(workspace_id, SECRET_NAME)


def signature(secret: str, body: bytes) -> str:
    """The X-Hierarch-Signature value of a body: `sha256=` and the hex HMAC-SHA256."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


# -- scheduling ---------------------------------------------------------------------------------


class _Hintable(Protocol):
    """A Celery task that takes a delivery's id (runs.tasks.deliver_webhook)."""

    def delay_on_commit(self, *args: Any) -> None: ...

    def apply_async_on_commit(self, args: tuple, **options: Any) -> None: ...


_deliver_task: _Hintable | None = None


def webhook_hints_install(*, deliver_task: _Hintable) -> None:
    """The Celery task that carries a delivery's hint with HIERARCH_EXECUTOR=celery, handed
    over once the runs app is ready (runs/apps.py): the tasks sit above this module."""
    global _deliver_task
    _deliver_task = deliver_task


def webhook_schedule(*, run_id: str, url: str, status: str) -> WebhookDelivery | None:
    """In the transaction that ends a root run: the first attempt's row, sent after commit."""
    event = EVENTS.get(status)
    if event is None:
        return None
    delivery = WebhookDelivery.objects.create(
        delivery_id=uuid.uuid4(), run_id=run_id, url=url, event=event, due_at=timezone.now()
    )
    _hint(delivery.pk, 0.0)
    return delivery


def webhook_attention_schedule(*, trace_id: str, run_id: str) -> WebhookDelivery | None:
    """In the transaction that writes a run of the trace BLOCKED (after its BLOCKED event):
    a `run.needs_attention` delivery of the root's document, when the root has a
    webhook_url, sent after commit. Its id is made from that event, so the same block is
    never told twice (a second call for it finds the delivery made); a new block of the run
    has a new event, and is told again."""
    url = Run.objects.filter(pk=trace_id).values_list("webhook_url", flat=True).first()
    if not url:
        return None
    seq = (
        RunEvent.objects.filter(trace_id=trace_id, run_id=run_id, type="run.status")
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    if seq is None:
        return None  # no event says it blocked: nothing to name the block by
    delivery_id = uuid.uuid5(_BLOCK_IDS, f"{trace_id}:{seq}")
    if WebhookDelivery.objects.filter(delivery_id=delivery_id, attempt=1).exists():
        return None
    delivery = WebhookDelivery.objects.create(
        delivery_id=delivery_id,
        run_id=trace_id,
        url=url,
        event=NEEDS_ATTENTION,
        due_at=timezone.now(),
    )
    _hint(delivery.pk, 0.0)
    return delivery


def _hint(delivery_pk: int, delay_s: float) -> None:
    """Ask for the attempt to be sent in `delay_s` seconds, after the current commit."""
    if delay_s > LONGEST_HINT_SECONDS:
        return  # webhook_sweep sends it when it is due
    if settings.HIERARCH_EXECUTOR == "celery":
        if _deliver_task is None:
            raise RuntimeError("no webhook task installed: is the runs app loaded?")
        if delay_s > 0:
            _deliver_task.apply_async_on_commit((delivery_pk,), countdown=delay_s)
        else:
            _deliver_task.delay_on_commit(delivery_pk)
        return

    transaction.on_commit(lambda: background.later(delay_s, _deliver_in_thread, delivery_pk))


def _deliver_in_thread(delivery_pk: int) -> None:
    close_old_connections()
    try:
        webhook_deliver(delivery_pk=delivery_pk)
    except Exception:
        log.exception("webhook delivery %s failed", delivery_pk)
    finally:
        connections.close_all()


def webhook_sweep(limit: int = 200) -> int:
    """Send again every attempt that is due and nobody is sending (its hint was lost, or the
    worker that claimed it died); answers how many."""
    now = timezone.now()
    stuck = (
        WebhookDelivery.objects.filter(
            Q(status=WebhookStatus.PENDING, due_at__lte=now - SWEEP_GRACE)
            | Q(status=WebhookStatus.SENDING, claimed_until__lte=now)
        )
        .order_by("due_at")
        .values_list("pk", flat=True)[:limit]
    )
    found = list(stuck)
    for pk in found:
        _hint(pk, 0.0)
    return len(found)


# -- sending ------------------------------------------------------------------------------------


def _claim(delivery_pk: int) -> bool:
    """Take the attempt for this worker, for as long as a send can take: a duplicate hint,
    or a second worker, finds nothing to do."""
    now = timezone.now()
    until = now + timedelta(seconds=_config()["TIMEOUT_SECONDS"] + 30)
    return bool(
        WebhookDelivery.objects.filter(pk=delivery_pk, due_at__lte=now)
        .filter(
            Q(status=WebhookStatus.PENDING)
            | Q(status=WebhookStatus.SENDING, claimed_until__lte=now)
        )
        .update(status=WebhookStatus.SENDING, claimed_until=until)
    )


def _body(run: Run) -> bytes:
    return json.dumps(run_document(run), separators=(",", ":"), ensure_ascii=False).encode()


def _post(delivery: WebhookDelivery, body: bytes, secret: str) -> tuple[int | None, str]:
    """One POST; the answer's status code (None when there was none) and what went wrong."""
    timeout = float(_config()["TIMEOUT_SECONDS"])
    url, host = _parsed(delivery.url)
    address = _resolve(url, host)  # again: the name may resolve elsewhere by now
    headers = {
        "Host": _host_header(host, url.port),
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Hierarch-Event": delivery.event,
        "X-Hierarch-Delivery": str(delivery.delivery_id),
        "X-Hierarch-Attempt": str(delivery.attempt),
        "X-Hierarch-Timestamp": str(int(time.time())),
        "X-Hierarch-Signature": signature(secret, body),
    }
    pinned = url.copy_with(host=address)
    try:
        with httpx.Client(trust_env=False, follow_redirects=False, timeout=timeout) as client:
            request = client.build_request(
                "POST",
                pinned,
                headers=headers,
                content=body,
                extensions={"sni_hostname": host} if url.scheme == "https" else {},
            )
            response = client.send(request)
    except httpx.TimeoutException:
        return None, f"{host} did not answer within {timeout:g} s"
    except httpx.HTTPError as exc:
        return None, f"the request to {host} failed: {type(exc).__name__}"
    if 200 <= response.status_code < 300:
        return response.status_code, ""
    return response.status_code, f"{host} answered {response.status_code}"


def _host_header(host: str, port: int | None) -> str:
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{port}" if port else host


def backoff_seconds(attempt: int) -> float:
    """The wait after the `attempt`-th failure: BACKOFF_SECONDS, doubled at each one."""
    return float(_config()["BACKOFF_SECONDS"]) * 2 ** (attempt - 1)


def webhook_deliver(*, delivery_pk: int) -> WebhookDelivery | None:
    """Send one attempt if it is due and nobody else is sending it; record the answer and,
    after a failure, make the next attempt (up to MAX_ATTEMPTS). Answers the attempt, or None
    when there was nothing to do."""
    if not _claim(delivery_pk):
        return None
    delivery = WebhookDelivery.objects.select_related("run", "run__entity").get(pk=delivery_pk)
    run = delivery.run
    body = _body(run)
    started = time.monotonic()
    refused = False
    try:
        code, error = _post(delivery, body, webhook_secret(run.workspace_id))
    except WebhookRefused as refusal:
        # An address that may not be called will not become callable by waiting: no retry.
        code, error, refused = None, f"refused: {refusal}", True
    _attempt_recorded(delivery, code, error, started=started, refused=refused)
    log.info(
        "webhook %s attempt %d for run %s: %s",
        delivery.delivery_id,
        delivery.attempt,
        run.pk,
        error or f"delivered ({code})",
    )
    return delivery


def _attempt_recorded(
    delivery: WebhookDelivery, code: int | None, error: str, *, started: float, refused: bool
) -> None:
    """Save the attempt's answer and, after a failure that may pass, create the next attempt
    (up to MAX_ATTEMPTS), hinted to the executor at its due time."""
    now = timezone.now()
    delivery.attempted_at = now
    delivery.latency_ms = int((time.monotonic() - started) * 1000)
    delivery.status_code = code
    delivery.error = error[:2000]
    delivery.claimed_until = None
    if not error:
        delivery.status = WebhookStatus.DELIVERED
        delivery.delivered_at = now
    else:
        delivery.status = WebhookStatus.FAILED
    retry = bool(error) and not refused and delivery.attempt < int(_config()["MAX_ATTEMPTS"])
    with transaction.atomic():
        if retry:
            wait = backoff_seconds(delivery.attempt)
            delivery.next_attempt_at = now + timedelta(seconds=wait)
            following = WebhookDelivery.objects.create(
                delivery_id=delivery.delivery_id,
                run_id=delivery.run_id,
                url=delivery.url,
                event=delivery.event,
                attempt=delivery.attempt + 1,
                due_at=delivery.next_attempt_at,
            )
            _hint(following.pk, wait)
        delivery.save(
            update_fields=[
                "status",
                "attempted_at",
                "latency_ms",
                "status_code",
                "error",
                "claimed_until",
                "delivered_at",
                "next_attempt_at",
            ]
        )
