"""Deterministic values for a JSON Schema, and deterministic prose.

The built-in offline model answers with these, and simulated tools return them, so the whole
product runs with no key and no network. Pure Python: no Django, no litellm.

`synthesize(schema, seed=...)` returns a value valid against the schema for the keywords people
write by hand (types, `properties`/`required`, `enum`, `const`, string formats, lengths and
simple patterns, numeric bounds and `multipleOf`, `items`/`prefixItems`/`minItems`,
`uniqueItems`, `allOf`, the first usable branch of `oneOf`/`anyOf`, local `$ref`s, nullable
types). Property names steer the text: a `video_url` becomes a URL, an `email` an address, a
`confidence` a number in [0, 1]. The same schema and seed always give the same value.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import random
import re
import unicodedata
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from runs.engine import patterns
from runs.engine import regex_syntax as rx

__all__ = ["synthesize", "text_answer"]

# Below this depth every property is filled; past it only required ones, so recursive
# schemas ($ref to themselves) end.
_FULL_DEPTH = 6
_MAX_DEPTH = 24
_BASE_TIME = dt.datetime(2025, 1, 15, 10, 0, 0, tzinfo=dt.UTC)

_FIRST_NAMES = ("Ada", "Grace", "Alan", "Katherine", "Linus", "Margaret", "Tim", "Barbara")
_LAST_NAMES = ("Lovelace", "Hopper", "Turing", "Johnson", "Torvalds", "Hamilton", "Liskov")
_COMPANIES = ("Acme Robotics", "Globex Analytics", "Initech Labs", "Umbrella Health", "Hooli")
_JOB_TITLES = (
    "Senior Software Engineer",
    "Product Designer",
    "Data Analyst",
    "Customer Success Manager",
    "Site Reliability Engineer",
)
_CITIES = ("Lisbon", "Toronto", "Berlin", "Austin", "Singapore")
_ADJECTIVES = (
    "clear",
    "flexible",
    "collaborative",
    "competitive",
    "practical",
    "modern",
    "inclusive",
    "reliable",
    "focused",
    "thoughtful",
)
_NOUNS = (
    "team culture",
    "career growth",
    "learning budget",
    "remote work",
    "health coverage",
    "product impact",
    "mentorship",
    "release process",
    "customer insight",
    "technical challenge",
)
_VERBS = ("Design", "Build", "Review", "Improve", "Coordinate", "Document", "Measure", "Ship")
_SKILLS = ("Python", "SQL", "distributed systems", "user research", "cloud infrastructure")
_SENTENCES = (
    "The main points are covered in order of importance.",
    "Each item is grounded in the information that was provided.",
    "Nothing here depends on data that was not supplied.",
    "The result is concise, specific and ready for the next step.",
    "Assumptions are stated plainly so a reviewer can check them.",
    "The tone stays professional, inclusive and direct.",
    "Open questions are listed rather than guessed at.",
    "The answer favours concrete details over general claims.",
)
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
_PLACEHOLDER_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_. "
# One or more characters of every Unicode general category, for \\p{…} classes and negated
# classes that hold every plain character.
_UNICODE_SAMPLES = "éßΩжא中ǅʰ\u0301\u0903\u20dd٣Ⅳ½‿—(){}«»!€^+©\u2028\u2029\u00a0\x07\u00ad\ue000"
_SAMPLE_CHARS = _PLACEHOLDER_CHARS + _UNICODE_SAMPLES
# Building a string for a pattern stops past this many pieces: nested repeats (`((a+)+)+…`)
# multiply, and a designer's pattern must not make the offline model run away.
_PATTERN_STEPS = 20_000


def synthesize(schema: Mapping[str, Any] | bool, *, seed: str) -> Any:
    """A value valid against `schema`, the same for the same schema and seed.

    Keywords this cannot honour (`not`, `if`/`then`/`else`, intricate patterns) are ignored;
    the value is then the best effort, not a guarantee.
    """
    root = schema if isinstance(schema, Mapping) else {}
    return _Synthesizer(root, seed).value(schema, name="", depth=0)


def text_answer(messages: Iterable[Mapping[str, Any]], *, seed: str) -> str:
    """A short, deterministic prose answer to the last user message."""
    rng = random.Random(seed)  # noqa: S311 - determinism, not secrecy
    question = ""
    for message in messages:
        if message.get("role") == "user":
            question = _message_text(message)
    topic = " ".join(question.split()[:16]).rstrip(".?!:;,")
    opening = f'Regarding "{topic}": ' if topic else ""
    picked = rng.sample(_SENTENCES, 3)
    return opening + " ".join(picked)


def _message_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(
            part.get("text", "") for part in content if isinstance(part, Mapping)
        ).strip()
    return ""


def _words(name: str) -> list[str]:
    return [word.lower() for word in _WORD_SPLIT.split(name) if word]


def _singular(name: str) -> str:
    if name.endswith("ies"):
        return name[:-3] + "y"
    if name.endswith("sses") or name.endswith("ches") or name.endswith("shes"):
        return name[:-2]
    if name.endswith("s") and not name.endswith("ss"):
        return name[:-1]
    return name


class _Synthesizer:
    def __init__(self, root: Mapping[str, Any], seed: str):
        self.root = root
        self.rng = random.Random(seed)  # noqa: S311 - determinism, not secrecy
        self.steps = 0

    # --- schema plumbing -------------------------------------------------------------------

    def resolve(self, schema: Mapping[str, Any], depth: int) -> Mapping[str, Any]:
        """Inline local `$ref`s and `allOf`, and pick the branch of `oneOf`/`anyOf`."""
        for _ in range(_MAX_DEPTH):
            if "$ref" in schema and depth < _MAX_DEPTH:
                target = self.ref(schema["$ref"])
                rest = {k: v for k, v in schema.items() if k != "$ref"}
                schema = _merge(target, rest) if rest else target
                continue
            if "allOf" in schema:
                merged: Mapping[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
                for part in schema["allOf"]:
                    if isinstance(part, Mapping):
                        merged = _merge(merged, part)
                schema = merged
                continue
            for keyword in ("oneOf", "anyOf"):
                if keyword in schema:
                    branches = [b for b in schema[keyword] if isinstance(b, Mapping)]
                    base = {k: v for k, v in schema.items() if k != keyword}
                    usable = [b for b in branches if b.get("type") != "null"] or branches
                    schema = _merge(base, usable[0]) if usable else base
                    break
            else:
                return schema
        return schema

    def ref(self, ref: str) -> Mapping[str, Any]:
        if not ref.startswith("#"):
            return {}  # remote references are not fetched
        node: Any = self.root
        for part in ref[1:].lstrip("/").split("/") if ref not in ("#", "#/") else []:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return {}
        return node if isinstance(node, Mapping) else {}

    # --- values ----------------------------------------------------------------------------

    def value(self, schema: Mapping[str, Any] | bool, *, name: str, depth: int) -> Any:
        if schema is False:
            return None  # nothing is valid; say so with the least surprising value
        if not isinstance(schema, Mapping):
            schema = {}
        schema = self.resolve(schema, depth)
        if "const" in schema:
            return copy.deepcopy(schema["const"])
        examples = schema.get("examples")
        if isinstance(examples, list) and examples:
            typed = [e for e in examples if _matches_type(e, schema.get("type"))]
            if typed:
                return copy.deepcopy(self.rng.choice(typed))
        if "enum" in schema and schema["enum"]:
            options = list(schema["enum"])
            typed = [o for o in options if _matches_type(o, schema.get("type"))]
            return copy.deepcopy(self.rng.choice(typed or options))
        kind = self.kind(schema, name)
        if kind == "null":
            return None
        if kind == "object":
            return self.object(schema, name=name, depth=depth)
        if kind == "array":
            return self.array(schema, name=name, depth=depth)
        if kind in ("number", "integer"):
            return self.number(schema, name=name, integer=kind == "integer")
        if kind == "boolean":
            return self.boolean(name)
        return self.string(schema, name=name)

    def kind(self, schema: Mapping[str, Any], name: str) -> str:
        declared = schema.get("type")
        if isinstance(declared, list):
            usable = [t for t in declared if t != "null"]
            if not usable:
                return "null"
            declared = usable[0]
        if isinstance(declared, str):
            return declared
        keys = schema.keys()
        if keys & {"properties", "required", "additionalProperties", "minProperties"}:
            return "object"
        if keys & {"items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"}:
            return "array"
        if keys & {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}:
            return "number"
        if keys & {"minLength", "maxLength", "pattern", "format"}:
            return "string"
        return _kind_from_name(_words(name))

    def object(self, schema: Mapping[str, Any], *, name: str, depth: int) -> dict[str, Any]:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        required = schema.get("required")
        required = [r for r in required if isinstance(r, str)] if isinstance(required, list) else []
        # The seed's exchange format marks required properties inside the property itself.
        required += [
            key
            for key, sub in properties.items()
            if isinstance(sub, Mapping) and sub.get("required") is True and key not in required
        ]
        full = depth < _FULL_DEPTH
        # Values drawn in the keys' sorted order, shown in the schema's: the same answer
        # whatever order a schema's keys come in (PostgreSQL's jsonb keeps its own).
        drawn = {
            key: self.value(properties[key], name=key, depth=depth + 1)
            for key in sorted(properties)
            if full or key in required
        }
        out: dict[str, Any] = {key: drawn[key] for key in properties if key in drawn}
        extra = schema.get("additionalProperties", True)
        extra_schema = extra if isinstance(extra, Mapping) else {}
        for key in required:
            if key not in out:
                out[key] = self.value(extra_schema, name=key, depth=depth + 1)
        maximum = schema.get("maxProperties")
        if isinstance(maximum, int) and len(out) > maximum:
            keep = [k for k in out if k in required]
            keep += [k for k in out if k not in required][: max(0, maximum - len(keep))]
            out = {k: out[k] for k in out if k in keep}
        minimum = schema.get("minProperties")
        if isinstance(minimum, int) and extra is not False:
            index = 1
            while len(out) < minimum:
                key = f"{_singular(name) or 'field'}_{index}"
                index += 1
                if key not in out:
                    out[key] = self.value(extra_schema, name=key, depth=depth + 1)
        return out

    def array(self, schema: Mapping[str, Any], *, name: str, depth: int) -> list[Any]:
        items: Any = schema.get("items", {})
        prefix = schema.get("prefixItems")
        if isinstance(items, list):  # draft 4-7 tuples
            prefix, items = items, schema.get("additionalItems", {})
        prefix = [p for p in prefix if isinstance(p, Mapping | bool)] if prefix else []
        words = _words(name)
        low = schema.get("minItems", 0) if isinstance(schema.get("minItems"), int) else 0
        high = schema.get("maxItems") if isinstance(schema.get("maxItems"), int) else None
        if items is False:
            high = len(prefix) if high is None else min(high, len(prefix))
        if low == 0 and (words and words[-1] in ("errors", "warnings", "issues", "problems")):
            wanted = 0  # a clean result: no errors to report
        elif depth >= _FULL_DEPTH:
            wanted = 0  # deep (often recursive) structures end here
        else:
            wanted = 3 if depth < 3 else 2
        count = max(low, wanted)
        if high is not None:
            count = min(count, high)
        item_name = _singular(name)
        unique = schema.get("uniqueItems") is True
        out: list[Any] = []
        seen: set[str] = set()
        attempts = 0
        contains = schema.get("contains")
        while len(out) < count and attempts < count * 6 + 6:
            attempts += 1
            index = len(out)
            if index == 0 and isinstance(contains, Mapping):
                sub: Mapping[str, Any] | bool = contains
            elif index < len(prefix):
                sub = prefix[index]
            else:
                sub = items if isinstance(items, Mapping | bool) else {}
            item = self.value(sub, name=item_name, depth=depth + 1)
            if unique:
                key = _canonical(item)
                if key in seen:
                    continue
                seen.add(key)
            out.append(item)
        return out

    def number(self, schema: Mapping[str, Any], *, name: str, integer: bool) -> int | float:
        bounds = _bounds(schema)
        low, low_open, high, high_open = bounds
        step = schema.get("multipleOf")
        value: int | float = self.guess_number(_words(name), low, high)
        if integer:
            ilow, ihigh = _int_low(low, low_open), _int_high(high, high_open)
            value = int(round(value))
            if ilow is not None and value < ilow:
                value = ilow
            if ihigh is not None and value > ihigh:
                value = ihigh
        elif not _within(value, *bounds):
            value = self.inside(*bounds)
        if isinstance(step, int | float) and not isinstance(step, bool) and step > 0:
            fitted = _fit_multiple(value, step, bounds, integer=integer)
            value = value if fitted is None else fitted
        return value

    def inside(
        self, low: float | None, low_open: bool, high: float | None, high_open: bool
    ) -> float:
        if low is not None and high is not None:
            for candidate in (
                round(low + (high - low) * self.rng.uniform(0.25, 0.75), 2),
                (low + high) / 2,
            ):
                if _within(candidate, low, low_open, high, high_open):
                    return candidate
            return (low + high) / 2
        if low is not None:
            return float(math.floor(low) + 1)
        if high is not None:
            return float(math.ceil(high) - 1)
        return 1.0

    def guess_number(self, words: list[str], low: float | None, high: float | None) -> float:
        rng = self.rng
        stem = set(words)
        if stem & {"score", "confidence", "probability", "likelihood", "ratio", "similarity"} or (
            stem & {"rate", "relevance", "certainty", "weight"}
        ):
            if high is not None and high > 1:  # a score out of 10 or 100
                floor = low if low is not None else 0
                return round(floor + (high - floor) * rng.uniform(0.72, 0.97), 2)
            return round(rng.uniform(0.72, 0.97), 2)
        if stem & {"percent", "percentage", "pct"}:
            return round(rng.uniform(60, 95), 1)
        if stem & {"seconds", "secs", "duration"}:
            return float(rng.choice((15, 30, 45, 60)))
        if stem & {"minutes", "mins"}:
            return float(rng.choice((5, 10, 15, 30)))
        if stem & {"ms", "millis", "milliseconds", "latency"}:
            return float(rng.randint(120, 900))
        if stem & {"salary", "compensation"}:
            return float(rng.randrange(60_000, 160_000, 5_000))
        if stem & {"cost", "price", "amount", "usd", "budget", "fee", "spend", "eur"}:
            return round(rng.uniform(0.5, 50), 2)
        if stem & {"count", "num", "number", "total", "quantity", "size", "length"}:
            return float(rng.randint(1, 10))
        if stem & {"rating", "stars", "priority", "rank", "index", "position", "order", "level"}:
            return float(rng.randint(1, 5))
        if stem & {"age"}:
            return float(rng.randint(25, 55))
        if stem & {"year"}:
            return 2025.0
        if stem & {"temperature"}:
            return 0.7
        if stem & {"tokens"}:
            return float(rng.randint(200, 2_000))
        if stem & {"port"}:
            return 8080.0
        if stem & {"lat", "latitude"}:
            return round(rng.uniform(-60, 60), 4)
        if stem & {"lng", "lon", "longitude"}:
            return round(rng.uniform(-150, 150), 4)
        return round(rng.uniform(1, 100), 2)

    def boolean(self, name: str) -> bool:
        words = set(_words(name))
        if words & {"valid", "passed", "success", "successful", "approved", "ok", "complete"}:
            return True
        if words & {"completed", "compliant", "accurate", "accessible", "available", "enabled"}:
            return True
        if words & {"converged", "done", "safe", "verified", "consistent", "sufficient"}:
            return True
        if words & {"failed", "error", "blocked", "rejected", "duplicate", "escalate", "flagged"}:
            return False
        if words & {"needs", "requires", "unsafe", "invalid", "toxic", "pii", "missing"}:
            return False
        return self.rng.random() < 0.5

    def string(self, schema: Mapping[str, Any], *, name: str) -> str:
        given_low, given_high = schema.get("minLength"), schema.get("maxLength")
        low: int = given_low if isinstance(given_low, int) else 0
        high: int | None = given_high if isinstance(given_high, int) else None
        pattern = schema.get("pattern")
        fmt = schema.get("format")
        text: str | None = None
        if isinstance(pattern, str):
            text = self.from_pattern(pattern, low, high)
            if text is not None:
                return text
        if isinstance(fmt, str):
            text = self.formatted(fmt, name)
        if text is None:
            text = self.named_text(name)
        return self.fit_length(text, low, high)

    def fit_length(self, text: str, low: int, high: int | None) -> str:
        while len(text) < low:
            text = f"{text} {self.rng.choice(_ADJECTIVES)} {self.rng.choice(_NOUNS)}".strip()
        if high is not None and len(text) > high:
            text = text[:high].rstrip() if high > 0 else ""
            text = text + "x" * (low - len(text)) if len(text) < low else text
        return text

    def formatted(self, fmt: str, name: str) -> str | None:
        rng = self.rng
        moment = _BASE_TIME + dt.timedelta(days=rng.randint(0, 365), seconds=rng.randint(0, 86_399))
        slug = "-".join(_words(name)) or "item"
        token = f"{rng.getrandbits(32):08x}"
        if fmt == "date-time":
            return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
        if fmt == "date":
            return moment.strftime("%Y-%m-%d")
        if fmt == "time":
            return moment.strftime("%H:%M:%SZ")
        if fmt == "duration":
            return f"PT{rng.choice((15, 30, 45, 60))}S"
        if fmt in ("email", "idn-email"):
            return self.email()
        if fmt in ("hostname", "idn-hostname"):
            return f"{slug}-{token[:4]}.example.invalid"
        if fmt == "ipv4":
            return f"192.0.2.{rng.randint(1, 254)}"
        if fmt == "ipv6":
            return f"2001:db8::{rng.randint(1, 0xFFFF):x}"
        if fmt in ("uri", "iri", "url"):
            return self.url(_words(name))
        if fmt in ("uri-reference", "iri-reference"):
            return f"/{slug}/{token}"
        if fmt == "uri-template":
            return f"https://example.invalid/{slug}/{{id}}"
        if fmt == "uuid":
            return str(uuid.UUID(int=rng.getrandbits(128), version=4))
        if fmt == "json-pointer":
            return f"/{slug}/0"
        if fmt == "relative-json-pointer":
            return "0/" + slug
        if fmt == "regex":
            return "^[a-z]+$"
        return None

    def email(self) -> str:
        first, last = self.rng.choice(_FIRST_NAMES), self.rng.choice(_LAST_NAMES)
        return f"{first}.{last}@example.invalid".lower()

    def url(self, words: list[str]) -> str:
        rng = self.rng
        topic = [w for w in words if w not in ("url", "uri", "link", "href", "endpoint")]
        token = f"{rng.getrandbits(48):012x}"
        extension = ""
        kinds = set(topic)
        if kinds & {"video", "clip", "movie"}:
            folder, extension = "videos", ".mp4"
        elif kinds & {"image", "thumbnail", "photo", "picture", "logo", "avatar"}:
            folder, extension = "images", ".png"
        elif kinds & {"audio", "voiceover", "podcast"}:
            folder, extension = "audio", ".mp3"
        elif kinds & {"pdf", "document", "report", "file"}:
            folder, extension = "files", ".pdf"
        else:
            folder = "-".join(topic) or "resources"
        return f"https://example.invalid/{folder}/{token}{extension}"

    def named_text(self, name: str) -> str:
        """Text that reads like what a field of this name holds."""
        words = _words(name)
        for test, make in _NAMED_TEXT:
            if test(words):
                return make(self, words)
        return self.phrase(words)

    def phrase(self, words: list[str]) -> str:
        rng = self.rng
        subject = " ".join(words) if words else rng.choice(_NOUNS)
        return f"{rng.choice(_ADJECTIVES).capitalize()} {subject}"

    def sentences(self, count: int, words: list[str]) -> str:
        topic = " ".join(words) or "answer"
        first = f"This {topic} is {self.rng.choice(_ADJECTIVES)} and specific."
        rest = self.rng.sample(_SENTENCES, min(count - 1, len(_SENTENCES)))
        return " ".join([first, *rest])

    def from_pattern(self, pattern: str, low: int, high: int | None) -> str | None:
        """A string `pattern` matches within the lengths, or None. Only a pattern RE2
        accepted is parsed (`regex_syntax.py`, never matched there); what is built is checked
        with RE2, and the building is bounded by _PATTERN_STEPS."""
        try:
            compiled = patterns.compile_pattern(pattern)  # refused: no value from it
            tree = rx.parse(pattern)
        except (patterns.PatternRefused, rx.RegexSyntaxError, RecursionError):
            return None
        for _ in range(4):
            self.steps = 0
            try:
                text = self.emit(tree)
            except (ValueError, RecursionError):
                return None
            if compiled.search(text) and len(text) >= low and (high is None or len(text) <= high):
                return text
        return None

    def emit(self, node: rx.Node) -> str:
        self.steps += 1
        if self.steps > _PATTERN_STEPS:
            raise ValueError("the pattern asks for too long a string")
        if isinstance(node, rx.Literal):
            return node.char
        if isinstance(node, rx.Sequence):
            return "".join(self.emit(item) for item in node.items)
        if isinstance(node, rx.CharClass):
            return self.pick_from_class(node)
        if isinstance(node, rx.Repeat):
            high = node.low + 3 if node.high is None else node.high
            times = self.rng.randint(node.low, min(high, max(node.low, 1) + 2))
            return "".join(self.emit(node.node) for _ in range(times))
        if isinstance(node, rx.Group):
            return self.emit(node.node)
        if isinstance(node, rx.Alternation):
            return self.emit(self.rng.choice(node.branches))
        if isinstance(node, rx.AnyChar):
            return self.rng.choice("abcdefghijklmnopqrstuvwxyz")
        return ""  # an anchor: a position, no text

    def pick_from_class(self, node: rx.CharClass) -> str:
        if not node.negated and node.items:
            item = self.rng.choice(node.items)
            if isinstance(item, rx.Range):
                return self.pick_from_range(item)
            return _from_category(item)
        for ch in _SAMPLE_CHARS if node.negated else "":
            if not rx.class_contains(node.items, ch):
                return ch
        raise ValueError("no character in the class")

    def pick_from_range(self, item: rx.Range) -> str:
        """A character of the range: any when it is small, else a plain one it holds."""
        if item.high - item.low < 128 and not (item.low <= 0xDFFF and item.high >= 0xD800):
            return chr(self.rng.randint(item.low, item.high))
        plain = [ch for ch in _PLACEHOLDER_CHARS if item.low <= ord(ch) <= item.high]
        if plain:
            return self.rng.choice(plain)
        code = self.rng.randint(item.low, item.high)
        if 0xD800 <= code <= 0xDFFF:  # a surrogate has no UTF-8 form: step past them
            code = 0xE000 if item.high >= 0xE000 else item.low
        if 0xD800 <= code <= 0xDFFF:
            raise ValueError("a range of surrogates only")
        return chr(code)


# --- text by property name -------------------------------------------------------------------


def _has(*names: str) -> Callable[[list[str]], bool]:
    wanted = set(names)
    return lambda words: bool(wanted & set(words))


def _last(*names: str) -> Callable[[list[str]], bool]:
    return lambda words: bool(words) and words[-1] in names


def _person(s: _Synthesizer, words: list[str]) -> str:
    return f"{s.rng.choice(_FIRST_NAMES)} {s.rng.choice(_LAST_NAMES)}"


def _identifier(s: _Synthesizer, words: list[str]) -> str:
    if "uuid" in words:
        return str(uuid.UUID(int=s.rng.getrandbits(128), version=4))
    prefix = "-".join(w for w in words if w != "id")[:16] or "id"
    return f"{prefix}-{s.rng.getrandbits(32):08x}"


def _persona(s: _Synthesizer, words: list[str]) -> str:
    title = s.rng.choice(_JOB_TITLES).lower()
    skill = s.rng.choice(_SKILLS)
    return f"An experienced {title} with strong {skill} skills who values {s.rng.choice(_NOUNS)}."


def _requirement(s: _Synthesizer, words: list[str]) -> str:
    return f"{s.rng.randint(2, 7)}+ years of experience with {s.rng.choice(_SKILLS)}"


def _responsibility(s: _Synthesizer, words: list[str]) -> str:
    return f"{s.rng.choice(_VERBS)} {s.rng.choice(_NOUNS)} with the team"


def _selling_point(s: _Synthesizer, words: list[str]) -> str:
    return f"{s.rng.choice(_ADJECTIVES).capitalize()} {s.rng.choice(_NOUNS)}"


def _script(s: _Synthesizer, words: list[str]) -> str:
    company = s.rng.choice(_COMPANIES)
    return (
        f"At {company}, your work reaches people every day. "
        f"Join a team known for {s.rng.choice(_NOUNS)} and {s.rng.choice(_NOUNS)}. "
        f"We offer {s.rng.choice(_ADJECTIVES)} {s.rng.choice(_NOUNS)} from day one. "
        "Apply today and help us build what comes next."
    )


def _timestamp(s: _Synthesizer, words: list[str]) -> str:
    return s.formatted("date-time", "") or ""


def _date(s: _Synthesizer, words: list[str]) -> str:
    return s.formatted("date", "") or ""


_NAMED_TEXT: tuple[
    tuple[Callable[[list[str]], bool], Callable[[_Synthesizer, list[str]], str]], ...
]
_NAMED_TEXT = (
    (_has("url", "uri", "link", "href", "endpoint", "website", "homepage"), lambda s, w: s.url(w)),
    (_has("email", "mail"), lambda s, w: s.email()),
    (_has("phone", "mobile", "telephone"), lambda s, w: f"+1-202-555-01{s.rng.randint(10, 99)}"),
    (_last("id", "uuid", "guid"), _identifier),
    (_last("at", "timestamp", "datetime"), _timestamp),
    (_last("date", "deadline", "day"), _date),
    (
        lambda w: w[-2:] in (["content", "type"], ["mime", "type"]) or "mimetype" in w,
        lambda s, w: "application/json",
    ),
    (
        _last(
            "summary",
            "description",
            "explanation",
            "rationale",
            "reasoning",
            "reason",
            "feedback",
            "notes",
            "note",
            "comment",
            "answer",
            "response",
            "message",
            "thought",
            "analysis",
            "recommendation",
            "critique",
            "text",
            "body",
            "content",
            "output",
            "instructions",
            "prompt",
            "query",
            "question",
            "details",
            "context",
        ),
        lambda s, w: s.sentences(2, w),
    ),
    (_has("persona", "audience"), _persona),
    (_has("requirement", "qualification"), _requirement),
    (_has("responsibility", "duty", "task"), _responsibility),
    (_has("benefit", "perk", "selling", "highlight", "strength"), _selling_point),
    (_has("script", "narration", "transcript", "story"), _script),
    (
        _has("company", "organization", "organisation", "employer", "brand"),
        lambda s, w: s.rng.choice(_COMPANIES),
    ),
    (_has("job", "position", "role", "occupation"), lambda s, w: s.rng.choice(_JOB_TITLES)),
    (
        _last("title", "headline", "tagline", "subject", "caption", "label"),
        lambda s, w: (
            f"{s.rng.choice(_ADJECTIVES).capitalize()} {s.rng.choice(_NOUNS)} at "
            f"{s.rng.choice(_COMPANIES)}"
        ),
    ),
    (
        _has("author", "owner", "candidate", "user", "username", "reviewer", "person", "contact"),
        _person,
    ),
    (_last("name"), _person),
    (_has("city", "location", "address"), lambda s, w: s.rng.choice(_CITIES)),
    (_has("country"), lambda s, w: s.rng.choice(("PT", "CA", "DE", "US", "SG"))),
    (_has("currency"), lambda s, w: "USD"),
    (_has("language", "lang", "locale"), lambda s, w: "en"),
    (_has("timezone", "tz"), lambda s, w: "UTC"),
    (_has("color", "colour"), lambda s, w: f"#{s.rng.getrandbits(24):06x}"),
    (_has("version"), lambda s, w: f"1.{s.rng.randint(0, 9)}.0"),
    (_has("status", "state"), lambda s, w: s.rng.choice(("ready", "active", "complete"))),
    (_has("sentiment", "tone", "mood"), lambda s, w: s.rng.choice(("positive", "friendly"))),
    (
        _has("slug", "key", "code", "handle", "tag", "keyword", "sku", "token"),
        lambda s, w: f"{'-'.join(w[:-1]) or 'item'}-{s.rng.getrandbits(16):04x}",
    ),
    (_has("filename"), lambda s, w: f"{s.rng.choice(_NOUNS).replace(' ', '-')}.json"),
    (_has("path", "file", "ref"), lambda s, w: f"/data/{'-'.join(w) or 'item'}.json"),
)


def _kind_from_name(words: list[str]) -> str:
    """The type an untyped property most likely holds, from its name."""
    if not words:
        return "string"
    last = words[-1]
    if words[0] in ("is", "has", "can", "should", "needs", "requires"):
        return "boolean"
    if last in ("score", "confidence", "probability", "ratio", "cost", "usd", "price", "seconds"):
        return "number"
    if last in ("count", "total", "number", "quantity") or words[0] == "num":
        return "integer"
    if last.endswith("s") and last not in ("status", "address", "class", "process", "analysis"):
        return "array" if len(last) > 3 else "string"
    return "string"


# --- numbers ---------------------------------------------------------------------------------


def _bounds(schema: Mapping[str, Any]) -> tuple[float | None, bool, float | None, bool]:
    low, high = schema.get("minimum"), schema.get("maximum")
    low = low if _is_number(low) else None
    high = high if _is_number(high) else None
    low_open = high_open = False
    exclusive_low, exclusive_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if exclusive_low is True:  # draft 4: a flag on minimum
        low_open = low is not None
    elif _is_number(exclusive_low) and (low is None or exclusive_low >= low):
        low, low_open = exclusive_low, True
    if exclusive_high is True:
        high_open = high is not None
    elif _is_number(exclusive_high) and (high is None or exclusive_high <= high):
        high, high_open = exclusive_high, True
    return low, low_open, high, high_open


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _within(
    value: float, low: float | None, low_open: bool, high: float | None, high_open: bool
) -> bool:
    if low is not None and (value < low or (low_open and value == low)):
        return False
    return not (high is not None and (value > high or (high_open and value == high)))


def _int_low(low: float | None, low_open: bool) -> int | None:
    if low is None:
        return None
    edge = math.ceil(low)
    return edge + 1 if low_open and edge == low else edge


def _int_high(high: float | None, high_open: bool) -> int | None:
    if high is None:
        return None
    edge = math.floor(high)
    return edge - 1 if high_open and edge == high else edge


def _is_multiple(value: float, step: float) -> bool:
    # The same test jsonschema applies.
    if isinstance(step, float):
        quotient = value / step
        try:
            return int(quotient) == quotient
        except OverflowError:
            return False
    return value % step == 0


def _fit_multiple(
    value: float,
    step: float,
    bounds: tuple[float | None, bool, float | None, bool],
    *,
    integer: bool,
) -> int | float | None:
    """The multiple of `step` nearest `value` inside the bounds that passes jsonschema's
    float test (0.3 is not a multiple of 0.01 there; 0.25 is of 0.05)."""
    start = round(value / step)
    decimals = max(0, -math.floor(math.log10(step))) + 2
    for delta in range(256):
        for k in (start + delta, start - delta):
            for candidate in (round(k * step, decimals), k * step):
                if integer:
                    if not float(candidate).is_integer():
                        continue
                    candidate = int(round(candidate))
                if _within(candidate, *bounds) and _is_multiple(candidate, step):
                    return candidate
    return None


# --- regex sets ------------------------------------------------------------------------------


def _from_category(category: rx.Category) -> str:
    """The first of a few sample characters in the Unicode category (or outside it)."""
    for ch in _SAMPLE_CHARS:
        if unicodedata.category(ch).startswith(category.name) != category.negated:
            return ch
    raise ValueError(f"no sample character for \\p{{{category.name}}}")


# --- merging ---------------------------------------------------------------------------------

_LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")


def _merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Both schemas' constraints in one (enough for allOf and a picked oneOf branch)."""
    merged = dict(base)
    for key, value in extra.items():
        if key not in merged:
            merged[key] = value
        elif key == "properties" and isinstance(value, Mapping):
            properties = dict(merged[key])
            for name, sub in value.items():
                if (
                    name in properties
                    and isinstance(properties[name], Mapping)
                    and isinstance(sub, Mapping)
                ):
                    properties[name] = _merge(properties[name], sub)
                else:
                    properties[name] = sub
            merged[key] = properties
        elif key == "required" and isinstance(value, list) and isinstance(merged[key], list):
            merged[key] = list(dict.fromkeys([*merged[key], *value]))
        elif key in _LOWER_BOUNDS and _is_number(value) and _is_number(merged[key]):
            merged[key] = max(merged[key], value)
        elif key in _UPPER_BOUNDS and _is_number(value) and _is_number(merged[key]):
            merged[key] = min(merged[key], value)
        elif key == "type" and isinstance(value, list | str):
            ours = merged[key] if isinstance(merged[key], list) else [merged[key]]
            theirs = value if isinstance(value, list) else [value]
            both = [t for t in theirs if t in ours or (t == "integer" and "number" in ours)]
            merged[key] = (both[0] if len(both) == 1 else both) if both else value
        else:
            merged[key] = value
    return merged


def _matches_type(value: Any, declared: Any) -> bool:
    if declared is None:
        return True
    kinds = declared if isinstance(declared, list) else [declared]
    checks = {
        "null": value is None,
        "boolean": isinstance(value, bool),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": _is_number(value),
        "string": isinstance(value, str),
        "array": isinstance(value, list),
        "object": isinstance(value, dict),
    }
    return any(checks.get(kind, False) for kind in kinds)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
