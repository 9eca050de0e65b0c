"""What a browser would submit for a form of a rendered page."""

from __future__ import annotations

from html.parser import HTMLParser


class _FormFields(HTMLParser):
    def __init__(self, form_id: str) -> None:
        super().__init__(convert_charrefs=True)
        self.form_id = form_id
        self.inside = False
        self.fields: dict[str, list[str]] = {}
        self._select: str | None = None
        self._select_multiple = False
        self._select_first: str | None = None
        self._select_chosen = False
        self._textarea: str | None = None
        self._text: list[str] = []

    def _add(self, name: str, value: str) -> None:
        self.fields.setdefault(name, []).append(value)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {key: value if value is not None else "" for key, value in attrs}
        if tag == "form" and a.get("id") == self.form_id:
            self.inside = True
        if not self.inside or "disabled" in a:
            return
        name = a.get("name")
        if tag == "input" and name:
            kind = a.get("type", "text").lower()
            if kind in {"submit", "button", "image", "reset", "file"}:
                return
            if kind in {"checkbox", "radio"} and "checked" not in a:
                return
            self._add(name, a.get("value", "on" if kind in {"checkbox", "radio"} else ""))
        elif tag == "select" and name:
            self._select, self._select_first, self._select_chosen = name, None, False
            self._select_multiple = "multiple" in a
        elif tag == "option" and self._select:
            value = a.get("value", "")
            if self._select_first is None:
                self._select_first = value
            if "selected" in a:
                self._select_chosen = True
                self._add(self._select, value)
        elif tag == "textarea" and name:
            self._textarea, self._text = name, []

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self.inside:
            self.inside = False
        elif tag == "select" and self._select:
            single = not self._select_multiple
            if single and not self._select_chosen and self._select_first is not None:
                self._add(self._select, self._select_first)
            self._select = None
        elif tag == "textarea" and self._textarea:
            text = "".join(self._text)
            # A newline right after <textarea> belongs to the markup, not to the value.
            self._add(self._textarea, text[1:] if text.startswith("\n") else text)
            self._textarea = None

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self._text.append(data)


def _fields(html: str | bytes, form_id: str) -> dict[str, str | list[str]]:
    parser = _FormFields(form_id)
    parser.feed(html.decode() if isinstance(html, bytes) else html)
    if not parser.fields:
        raise AssertionError(f"no form #{form_id} with fields on the page")
    return {
        name: values[0] if len(values) == 1 else values for name, values in parser.fields.items()
    }


def form_data(html: str | bytes, form_id: str) -> dict[str, str | list[str]]:
    """The fields of `<form id=form_id>` as a browser would post them, without the hidden
    `__prefix__` templates of the admin's "Add another" rows."""
    return {
        name: value for name, value in _fields(html, form_id).items() if "__prefix__" not in name
    }


def added_row(html: str | bytes, form_id: str, prefix: str, index: int) -> dict:
    """The row the admin's inlines.js adds on "Add another": a copy of the `__prefix__`
    template numbered `index`, as posted untouched."""
    template = f"{prefix}-__prefix__-"
    # inlines.js clones the whole row, the hidden `initial-…` inputs of fields with callable
    # defaults included.
    return {
        name.replace(template, f"{prefix}-{index}-"): value
        for name, value in _fields(html, form_id).items()
        if name.startswith(template) or name.startswith(f"initial-{template}")
    }
