"""Alerts (seed 000 §11.2): raised once each, stored, listed in the admin, mailed to the
workspace's admins.

Most are found by `runs.alerts.evaluate_alerts`, which looks at the runs every minute or so
(Celery beat, or the inline executor's sweeper thread); a quota at 90 % is raised when a run
starts (`runs.services.run_start`). This module raises, stores and sends them; it reads no
app above governance.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction

from entities.models import Workspace
from governance.addresses import AddressRefused, public_address
from governance.models import Alert, AlertSeverity
from governance.permissions import ADMINISTER, users_with
from governance.vault import VaultError, secret_resolve

log = logging.getLogger(__name__)

SLACK_TIMEOUT_S = 5


def alert_raise(
    *,
    workspace_id: int,
    kind: str,
    key: str,
    message: str,
    severity: str = AlertSeverity.WARNING,
    entity_id: Any = None,
    run_id: Any = None,
    details: dict | None = None,
) -> Alert | None:
    """Store the alert and notify, unless one with this key exists: answers the new alert,
    or None when it was raised before."""
    if Alert.objects.filter(workspace_id=workspace_id, key=key).exists():
        return None
    try:
        with transaction.atomic():
            alert = Alert.objects.create(
                workspace_id=workspace_id,
                kind=kind,
                key=key[:200],
                message=message,
                severity=severity,
                entity_id=entity_id,
                run_id=run_id,
                details=details or {},
            )
    except IntegrityError:  # raised at the same moment elsewhere
        return None
    log.warning("alert in workspace %s: %s", workspace_id, message)
    transaction.on_commit(lambda: notify(alert.pk))
    return alert


def notify(alert_id: int) -> None:
    """Mail the alert to the workspace's admins (Django's email backend: the console in the
    embedded default); a failure is logged, never raised into the caller."""
    alert = Alert.objects.select_related("workspace").get(pk=alert_id)
    recipients = [u.email for u in users_with(alert.workspace, ADMINISTER) if u.email]
    subject = f"[Hierarch] {alert.workspace.name}: {alert.get_kind_display()}"
    sent = True
    if recipients:
        try:
            send_mail(subject, alert.message, settings.DEFAULT_FROM_EMAIL, recipients)
        except Exception:
            log.exception("mailing alert %s failed", alert_id)
            sent = False
    if alert.workspace.slack_webhook_secret:
        sent = slack_post(alert.workspace, f"*{subject}*\n{alert.message}") and sent
    if sent:
        Alert.objects.filter(pk=alert_id).update(notified=True)


def slack_post(workspace: Workspace, text: str) -> bool:
    """Post `text` to the workspace's Slack incoming webhook (its URL kept in the vault);
    False, logged without the URL, when it cannot be delivered."""
    name = workspace.slack_webhook_secret
    try:
        url = httpx.URL(secret_resolve(workspace.pk, name))
        host = url.raw_host.decode("ascii").lower()
        if url.scheme not in ("http", "https") or not host:
            log.warning("secret %s is not an http(s) webhook URL; Slack not posted", name)
            return False
        # a private address only where HIERARCH_HTTP_ALLOW_PRIVATE says
        public_address(host, url.port or (443 if url.scheme == "https" else 80))
        response = httpx.post(str(url), json={"text": text}, timeout=SLACK_TIMEOUT_S)
    except (VaultError, AddressRefused, httpx.HTTPError, httpx.InvalidURL, UnicodeError) as exc:
        log.warning(
            "posting to Slack (secret %s) failed: %s", name, type(exc).__name__, exc_info=False
        )
        return False
    if response.status_code >= 400:
        log.warning("Slack answered %s to the webhook of secret %s", response.status_code, name)
        return False
    return True
