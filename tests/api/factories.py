"""Approval requests as the engine leaves them, with the whole explanation packet the API
shows: `tests.factories.approval_request` with a publisher's tool call."""

from __future__ import annotations

from typing import Any

from approvals.models import Approval, Risk
from runs.models import Run
from tests.factories import approval_request

# What the publisher may change before its tool call: the same schema the engine validates
# the tool's arguments with.
POST_SCHEMA = {
    "type": "object",
    "properties": {
        "channel": {"type": "string", "enum": ["news", "blog"]},
        "text": {"type": "string", "minLength": 1, "maxLength": 280},
    },
    "required": ["channel", "text"],
    "additionalProperties": False,
}


def approval_for(run: Run, **fields: Any) -> Approval:
    """A pending request of the run before it publishes a post; `fields` override any
    column."""
    packet: dict[str, Any] = {
        "step_name": "Publish the post",
        "payload": {"channel": "news", "text": "Our spring range is out"},
        "edit_schema": POST_SCHEMA,
        "allowed_decisions": [],
        "context_snapshot": {"input": {"brief": "spring range"}, "state": {"drafts": 2}},
        "reasoning_summary": "Posts the approved draft to the news channel",
        "confidence": {"overall": 0.72},
        "risk_level": Risk.HIGH,
        "risk_rank": 2,
        "risk_factors": ["publishes to the public", "cannot be undone"],
        "alternatives": [{"name": "Post to the blog", "confidence": 0.6}],
        "cost_estimate": {"cost_so_far_usd": "0.0021", "estimated_to_finish_usd": "0.0010"},
        "downstream_impact": {"steps": ["Report"], "reversible": False},
        "judge": {"decision": "escalate", "confidence": 0.55, "rationale": "tone is off"},
        "notification_channels": ["IN_APP"],
        "timeout_ms": 3_600_000,
        "timeout_action": "ABORT",
    }
    return approval_request(run, **{**packet, **fields})
