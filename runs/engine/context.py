"""Context engineering (seed 000 §3.6.3): what goes into a prompt, in which order, and how
large objects travel.

`build_context` takes the context parts by kind (SYSTEM_PROMPT, USER_INPUT, STATIC_PLAN,
DYNAMIC_PLAN, TOOL_RESULTS, MEMORY) and keeps them in priority order until
`max_context_tokens` is reached: the part that only partly fits is cut, the ones after it are
dropped. Token counting is injected (the gateway counts with litellm's tokenizer).

`artifact` handles an object over 10 KB: it is stored once, by the SHA-256 of its canonical
JSON, and passed INLINE (as it is), by REFERENCE (`artifact://sha256/<hex>` and a short
preview) or as a SUMMARY.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

LARGE_OBJECT_BYTES = 10 * 1024
PREVIEW_CHARS = 280
TRUNCATION_MARK = "\n… [truncated to fit the context]"
REFERENCE_PREFIX = "artifact://sha256/"

CountTokens = Callable[[str], int]
Summarize = Callable[[str], str]


@dataclass(frozen=True)
class ContextPart:
    """One part of the context as it will be sent."""

    kind: str
    text: str
    tokens: int
    truncated: bool = False


def build_context(
    parts: Mapping[str, str],
    priority: Sequence[str],
    max_tokens: int,
    count_tokens: CountTokens,
) -> tuple[list[ContextPart], list[str]]:
    """The parts kept, in priority order, and the kinds dropped to stay within `max_tokens`.

    Kinds present in `parts` but missing from `priority` come after the listed ones, in the
    order given (lowest priority). Empty parts are neither kept nor dropped. Separators the
    caller puts between parts are not counted.
    """
    kept: list[ContextPart] = []
    dropped: list[str] = []
    remaining = max_tokens
    for kind in ordered_kinds(parts, priority):
        text = parts[kind]
        if not text:
            continue
        if remaining <= 0:
            dropped.append(kind)
            continue
        tokens = count_tokens(text)
        if tokens <= remaining:
            kept.append(ContextPart(kind, text, tokens))
            remaining -= tokens
            continue
        cut = truncate_to_tokens(text, remaining, count_tokens)
        if cut is None:
            dropped.append(kind)
        else:
            kept.append(ContextPart(kind, cut, count_tokens(cut), truncated=True))
        remaining = 0
    return kept, dropped


def ordered_kinds(parts: Mapping[str, str], priority: Sequence[str]) -> list[str]:
    """The kinds of `parts` in priority order; kinds not listed come last."""
    listed = [kind for kind in dict.fromkeys(priority) if kind in parts]
    return listed + [kind for kind in parts if kind not in listed]


def truncate_to_tokens(text: str, budget: int, count_tokens: CountTokens) -> str | None:
    """The longest start of `text`, with a mark saying it was cut, within `budget` tokens;
    None when not even the mark and one character fit."""
    if count_tokens(text[:1] + TRUNCATION_MARK) > budget:
        return None
    low, high = 1, len(text)  # low always fits; find the largest prefix length that does
    while low < high:
        middle = (low + high + 1) // 2
        if count_tokens(text[:middle] + TRUNCATION_MARK) <= budget:
            low = middle
        else:
            high = middle - 1
    return text[:low] + TRUNCATION_MARK


# -- artifacts -------------------------------------------------------------------------------


class ArtifactStore(Protocol):
    """Where large objects are kept, by content digest; putting the same digest twice is a
    no-op for the caller (`artifact` checks `has` first)."""

    def has(self, digest: str) -> bool: ...

    def put(self, digest: str, content: str) -> None: ...

    def get(self, digest: str) -> str | None: ...


class InMemoryArtifactStore:
    """An ArtifactStore in a dict, for tests and the engine's own fast runs."""

    def __init__(self) -> None:
        self.items: dict[str, str] = {}
        self.puts = 0

    def has(self, digest: str) -> bool:
        return digest in self.items

    def put(self, digest: str, content: str) -> None:
        self.puts += 1
        self.items[digest] = content

    def get(self, digest: str) -> str | None:
        return self.items.get(digest)


def canonical_text(value: Any) -> str:
    """The text an object is measured, hashed and stored as: a string as it is, anything else
    as compact JSON with sorted keys (so equal objects share one digest)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def is_large(value: Any) -> bool:
    """Whether the object is over 10 KB (UTF-8 bytes of its canonical text)."""
    return len(canonical_text(value).encode()) > LARGE_OBJECT_BYTES


def reference(text: str) -> str:
    """The stable reference of a stored text: `artifact://sha256/<hex digest>`."""
    return REFERENCE_PREFIX + hashlib.sha256(text.encode()).hexdigest()


def artifact(
    value: Any,
    mode: str,
    *,
    store_large_objects: bool,
    summarize: Summarize | None = None,
    store: ArtifactStore | None = None,
) -> Any:
    """What to pass in place of `value`: the value itself when it is 10 KB or less; otherwise,
    after storing it once (when `store_large_objects` and a store is given), per `mode`:

    - INLINE: the value as it is;
    - REFERENCE: {"artifact": reference, "bytes": size, "preview": its first characters};
      with nothing stored there is nothing to refer to, so the value goes inline;
    - SUMMARY: {"artifact": reference (only when stored), "bytes": size, "summary": text},
      the summary from `summarize` (a model call, say) or `default_summary`.
    """
    if not is_large(value):
        return value
    text = canonical_text(value)
    ref = _store_once(text, store) if store_large_objects and store is not None else None
    if mode == "REFERENCE" and ref is not None:
        return {"artifact": ref, "bytes": len(text.encode()), "preview": _preview(text)}
    if mode == "SUMMARY":
        summary = (summarize or default_summary)(text)
        described: dict[str, Any] = {"bytes": len(text.encode()), "summary": summary}
        return {"artifact": ref, **described} if ref is not None else described
    return value


def with_artifacts(
    data: Mapping[str, Any],
    handling: Mapping[str, Any],
    *,
    summarize: Summarize | None = None,
    store: ArtifactStore | None = None,
) -> dict[str, Any]:
    """`data` with each top-level value passed through `artifact` under the entity's
    `artifact_handling` section (store_large_objects, artifact_reference_mode)."""
    mode = str(handling.get("artifact_reference_mode", "REFERENCE"))
    keep = bool(handling.get("store_large_objects", True))
    return {
        key: artifact(value, mode, store_large_objects=keep, summarize=summarize, store=store)
        for key, value in data.items()
    }


def default_summary(text: str) -> str:
    """A model-free description: the shape of the object and how it starts."""
    try:
        decoded = json.loads(text)
    except ValueError:
        decoded = text
    if isinstance(decoded, dict):
        keys = ", ".join(list(map(str, decoded))[:20])
        shape = f"an object with {len(decoded)} keys ({keys})"
    elif isinstance(decoded, list):
        shape = f"a list of {len(decoded)} items"
    else:
        shape = f"a text of {len(text)} characters"
    return f"{shape}, {len(text.encode())} bytes; it begins: {_preview(text)}"


def _store_once(text: str, store: ArtifactStore) -> str:
    ref = reference(text)
    digest = ref.removeprefix(REFERENCE_PREFIX)
    if not store.has(digest):
        store.put(digest, text)
    return ref


def _preview(text: str) -> str:
    flat = " ".join(text[: PREVIEW_CHARS * 2].split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"
