"""Notifications of a request (seed 000 §3.7.3's notification_channels).

IN_APP is the inbox itself: the badge and the open inbox pages hear of every change over the
channel layer (`approvals.services.broadcast_inbox`). EMAIL goes through Django's email
backend (the console in the embedded default) to the workspace's approvers, or to its admins
once a request escalated; SLACK posts to the workspace's incoming webhook, its URL kept in
the vault (`governance.alerts.slack_post`). A failure is logged, never raised into the run.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.core.mail import send_mail
from django.db import close_old_connections, connections

from approvals.models import Approval, ApprovalStatus
from governance.alerts import slack_post
from governance.permissions import ADMINISTER, APPROVE, users_with
from runs import background

log = logging.getLogger(__name__)

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def approval_link(approval: Approval, *, absolute: bool = False) -> str:
    """The request's page in the inbox; with the console's address for a message."""
    path = f"/approvals/{approval.pk}/"
    if not absolute:
        return path
    return getattr(settings, "HIERARCH_BASE_URL", "").rstrip("/") + path


def recipients(approval: Approval) -> list[str]:
    """Who is told: the approvers, or the admins once the request escalated."""
    perm = ADMINISTER if approval.status == ApprovalStatus.ESCALATED else APPROVE
    return sorted({user.email for user in users_with(approval.workspace, perm) if user.email})


def message_of(approval: Approval) -> tuple[str, str]:
    escalated = approval.status == ApprovalStatus.ESCALATED
    entity = approval.entity.name
    subject = (
        f"[Hierarch] {'Escalated: ' if escalated else ''}{entity} asks for a decision "
        f"({approval.get_checkpoint_trigger_display()}, risk {approval.risk_level})"
    )
    lines = [
        approval.reasoning_summary,
        "",
        f"Workspace: {approval.workspace.name}",
        f"Step: {approval.step_name or '(the run)'}",
        f"Risk: {approval.risk_level}"
        + (f" ({'; '.join(approval.risk_factors)})" if approval.risk_factors else ""),
    ]
    if not approval.approval_required:
        lines.append("Nothing to decide: this checkpoint only notifies; the run went on.")
    else:
        if approval.due_at:
            lines.append(
                f"Decide before {approval.due_at:%Y-%m-%d %H:%M:%S} UTC "
                f"(then: {approval.timeout_action})"
            )
        lines.append(f"Decide: {approval_link(approval, absolute=True)}")
    return subject, "\n".join(lines)


def notify(approval_id: int) -> None:
    """Send the request's EMAIL and SLACK notifications."""
    approval = Approval.objects.select_related("workspace", "entity").filter(pk=approval_id).first()
    if approval is None:
        return
    channels = set(approval.notification_channels or [])
    subject, body = message_of(approval)
    if "EMAIL" in channels:
        to = recipients(approval)
        if to:
            try:
                send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, to)
            except Exception:
                log.exception("mailing approval %s failed", approval_id)
    if "SLACK" in channels:
        if approval.workspace.slack_webhook_secret:
            slack_post(approval.workspace, f"*{subject}*\n{body}")
        else:
            log.warning(
                "approval %s asks for SLACK, but workspace %s has no Slack webhook secret",
                approval_id,
                approval.workspace_id,
            )


def _notify_in_thread(approval_id: int) -> None:
    close_old_connections()
    try:
        notify(approval_id)
    except Exception:
        log.exception("notifying approval %s failed", approval_id)
    finally:
        connections.close_all()


def send_in_background(approval_id: int) -> None:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hierarch-notify")
    background.submit(_pool, _notify_in_thread, approval_id)
