"""What every API test checks of an error answer."""

from __future__ import annotations


def error_of(response, status: int, code: str) -> dict:
    """The answer's error object, after checking its status, code and seed 001's shape."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    assert response["Content-Type"] == "application/json", response["Content-Type"]
    body = response.json()
    assert set(body) <= {"error", "retryable", "backoffSec"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    assert body["error"]["code"] == code, body
    assert body["error"]["message"], body
    assert isinstance(body["error"]["details"], dict), body
    assert isinstance(body["retryable"], bool), body
    return body
