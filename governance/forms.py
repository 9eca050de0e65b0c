"""The account pages' forms: a new API token's name and how long it lives."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.conf import settings

from governance.tokens import MAX_DAYS, expiry_in

DAYS_MESSAGE = f"Enter a whole number of days, 1 to {MAX_DAYS}."


class TokenCreateForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        help_text="What the token is for, e.g. “nightly import” or “CI deploys”.",
        error_messages={"required": "Give the token a name, to tell it apart later."},
    )
    days = forms.IntegerField(
        label="Expires after (days)",
        required=False,
        min_value=1,
        max_value=MAX_DAYS,
        widget=forms.NumberInput(attrs={"min": 1, "max": MAX_DAYS, "step": 1}),
        error_messages={
            "invalid": DAYS_MESSAGE,
            "min_value": DAYS_MESSAGE,
            "max_value": (
                f"At most {MAX_DAYS} days (ten years); tick “Never expires” for a token that "
                "does not expire."
            ),
        },
    )
    never = forms.BooleanField(label="Never expires", required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        default_days = settings.HIERARCH_API["TOKEN_DAYS"]
        self.fields["days"].initial = default_days if 0 < default_days <= MAX_DAYS else 90
        self.fields["never"].initial = default_days <= 0

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if cleaned.get("never"):
            self.errors.pop("days", None)  # a token that never expires has no days to read
            cleaned["days"] = None
        elif cleaned.get("days") is None and "days" not in self.errors:
            self.add_error(
                "days", f"{DAYS_MESSAGE} Or tick “Never expires” for a token that does not expire."
            )
        return cleaned

    def expires_at(self) -> datetime | None:
        """When the token expires (None: never), once the form is valid."""
        if self.cleaned_data["never"]:
            return None
        return expiry_in(self.cleaned_data["days"])
