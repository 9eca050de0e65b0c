"""What a step comes to, as data the driver acts on."""

from __future__ import annotations


class StepFailed(Exception):
    def __init__(
        self,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        retry_after_s: float | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.retryable = retryable
        self.retry_after_s = retry_after_s  # a rate limit's wait: the same attempt, later
