"""Offensive language: the PROFANITY and TOXICITY content filters. Pure Python, no Django.

Both rest on alt-profanity-check, a linear SVM over TF-IDF features trained on toxic and
offensive comments (Wikipedia talk pages, tweets). It loads scikit-learn and its model on
first use (about 0.9 s and 115 MB on this machine), so it is imported lazily, once per
process; `load_classifier()` pays that up front, at worker start.

PROFANITY reports words, or else sentences:

- a word whose own probability is at least WORD_THRESHOLD (0.99: fuck, shit, bitch, idiot,
  moron, crap…), wherever it stands;
- in a sentence scoring at least SENTENCE_THRESHOLD (0.5), also every word scoring 0.5 or more
  (damn, hell, kill, hate…); if no single word does, the whole sentence.

TOXICITY reports sentences meant to hurt someone:

- a sentence scoring at least TOXICITY_THRESHOLD (0.8) that is addressed to someone (a second
  person pronoun: you, your, yourself, u, ur): "you're pathetic", "fuck you";
- whatever the model says, a small curated list of THREAT patterns ("I will hurt you",
  "I'm going to beat you up", "kill yourself", "I know where you live", "you will pay for
  this") and INSULT patterns ("you are an idiot", "you stupid bitch", "nobody likes you",
  "shut up", "go to hell").

What these do not do: understand context. Swearing at nothing in particular ("this is
bullshit") is profanity, not toxicity. A threat worded outside the patterns and mild enough for
the model ("it would be a shame if something happened to your family") passes; so do sarcasm,
dog whistles, slurs misspelt beyond the model's vocabulary and every language but English.
Homonyms are flagged as profanity (Moby Dick, a garden hoe, a rooster called a cock), and so are
some neutral sentences the model learnt to dislike ("I hate Mondays"). Identity terms (gay,
Muslim, Black, women…) are masked before the model sees a sentence, because the model, like
most trained on such comments, scores neutral sentences that mention them as offensive ("He is
a homosexual man." scores 0.95); the price is that a slur-free insult built on one passes.
Prejudice as such is the BIAS filter's job (an LLM judge).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

PROFANITY = "PROFANITY"
TOXICITY = "TOXICITY"
THREAT = "THREAT"
INSULT = "INSULT"

SENTENCE_THRESHOLD = 0.5
WORD_THRESHOLD = 0.99
TOXICITY_THRESHOLD = 0.8

_MAX_SEGMENT = 400  # characters; the model's features dilute in longer stretches of text


class Hit(NamedTuple):
    start: int
    end: int
    kind: str  # PROFANITY, TOXICITY, THREAT or INSULT
    score: float | None  # the model's probability; None for a pattern
    detail: str = ""  # the pattern's name for THREAT and INSULT


_A = "['’]"  # typed and typographic apostrophes
_OBJECT = r"(?:you|u|him|her|them|your\s+\w+)"
_INTENT = (
    rf"(?:{_A}(?:ll|m\s+going\s+to|m\s+gonna|re\s+going\s+to|re\s+gonna)"
    r"|\s+(?:will|shall|am\s+going\s+to|am\s+gonna|are\s+going\s+to|are\s+gonna|gonna"
    r"|want\s+to|wanna))"
)
_VIOLENCE = r"(?:kill|hurt|shoot|stab|murder|strangle|choke|punch|rape|smash)"
_INSULT_NOUNS = (
    r"(?:idiot|moron|imbecile|loser|scum|clown|retard|bastard|bitch|jerk|failure"
    r"|piece\s+of\s+(?:shit|crap|garbage|trash)|waste\s+of\s+(?:space|air|oxygen))"
)
_INSULT_ADJECTIVES = (
    r"(?:stupid|dumb|worthless|pathetic|useless|retarded|disgusting|ugly|brainless|spineless)"
)
_INTENSIFIERS = (
    r"(?:such|so|a|an|the|just|really|totally|truly|completely|nothing\s+but|complete|absolute"
    r"|total|utter|fucking|bloody|little|fat|stupid|dumb|pathetic|worthless|useless|ugly)"
)
PATTERNS: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(
    (kind, name, re.compile(pattern, re.IGNORECASE))
    for kind, name, pattern in (
        (
            THREAT,
            "violent_intent",
            rf"\b(?:i|we){_INTENT}\s+(?:\w+\s+){{0,4}}?"
            rf"(?:{_VIOLENCE}\b(?:\s+\w+){{0,2}}?\s+{_OBJECT}|beat\s+{_OBJECT}\s+up)\b",
        ),
        (
            THREAT,
            "incitement_to_die",
            r"\b(?:kill|hang|shoot)\s+yourself\b|\bgo\s+(?:and\s+)?die\b"
            r"|\byou\s+(?:should|deserve\s+to|ought\s+to)\s+(?:just\s+)?die\b",
        ),
        (THREAT, "i_know_where_you_live", r"\bi\s+know\s+where\s+you\s+live\b"),
        (
            THREAT,
            "you_will_pay",
            rf"\byou(?:{_A}ll|\s+will|{_A}re\s+going\s+to|\s+are\s+going\s+to)\s+"
            r"(?:pay\s+for\s+(?:this|that)|regret\s+(?:this|that)|be\s+sorry)"
            r"(?=\s*(?:[.!?,;]|$))",  # "you will pay for this service" is no threat
        ),
        (
            INSULT,
            "you_are_an_insult",
            rf"\byou(?:{_A}?re|\s+are|\s+r)\s+(?:{_INTENSIFIERS}\s+)*"
            rf"(?:{_INSULT_NOUNS}|{_INSULT_ADJECTIVES}|a\s+joke)\b",
        ),
        (INSULT, "name_calling", rf"\byou\s+(?:{_INTENSIFIERS}\s+)*{_INSULT_NOUNS}\b"),
        (
            INSULT,
            "nobody_likes_you",
            r"\b(?:nobody|no\s+one|no-one)\s+(?:loves|likes|wants|cares\s+about)\s+you\b",
        ),
        (
            INSULT,
            "dismissal",
            r"\bshut\s+(?:up|your\s+(?:mouth|face))\b|\bgo\s+to\s+hell\b|\bscrew\s+you\b"
            r"|\bf(?:uck|\*+ck|\*+)\s+(?:you|off)\b",
        ),
    )
)

_SECOND_PERSON = re.compile(
    rf"\b(?:you|your|yours|yourself|yourselves|you{_A}re|youre|u|ur)\b", re.I
)
_SEGMENT = re.compile(r"[^.!?;\n]+")
_WORD = re.compile(r"[^\W_](?:[\w'’*@$]*[^\W_*])?")
IDENTITY_TERMS = frozenset(
    word
    for group in (
        "gay gays lesbian lesbians homosexual homosexuals bisexual queer transgender trans",
        "black blacks white whites asian asians african africans latino latina latinos",
        "hispanic mexican mexicans arab arabs immigrant immigrants refugee refugees",
        "muslim muslims islam islamic jew jews jewish christian christians hindu hindus sikh",
        "sikhs woman women girl girls feminist feminists disabled deaf blind",
    )
    for word in group.split()
)

_predict: Callable[[list[str]], Any] | None = None
_predict_lock = threading.Lock()
_word_scores: dict[str, float] = {}
_WORD_CACHE_SIZE = 50_000


def load_classifier() -> Callable[[list[str]], Any]:
    """The classifier's probability of each text being offensive, loaded on first use.

    alt-profanity-check's model is a calibrated ensemble of five linear SVMs; its own
    `predict_prob` goes through scikit-learn's generic `predict_proba` (about 2 ms a call
    whatever the batch). The same arithmetic as one sparse product with the five weight
    vectors costs a tenth of that; it is used when it agrees with `predict_prob` on probe
    texts at load time, else `predict_prob` is.
    """
    global _predict
    if _predict is None:
        with _predict_lock:
            if _predict is None:
                # Loads a scikit-learn model: paid by the first screening, not every start.
                from profanity_check import profanity_check

                _predict = _direct_scorer(profanity_check) or profanity_check.predict_prob
    return _predict


_PROBES = ["you are an idiot", "have a lovely day", "this is shit", "the build is green", ""]


def _direct_scorer(module: Any) -> Callable[[list[str]], Any] | None:
    try:
        import numpy as np  # loaded already by profanity_check, which brings it

        parts = module.model.calibrated_classifiers_
        weights = np.column_stack([part.estimator.coef_.ravel() for part in parts])
        intercepts = np.array([float(part.estimator.intercept_[0]) for part in parts])
        slopes = np.array([float(part.calibrators[0].a_) for part in parts])
        offsets = np.array([float(part.calibrators[0].b_) for part in parts])
        vectorizer = module.vectorizer

        def score(texts: list[str]) -> Any:
            decisions = np.asarray(vectorizer.transform(texts) @ weights) + intercepts
            # Platt scaling per member, averaged: CalibratedClassifierCV's predict_proba.
            return (1.0 / (1.0 + np.exp(decisions * slopes + offsets))).mean(axis=1)

        if np.allclose(score(_PROBES), module.predict_prob(_PROBES), rtol=0, atol=1e-9):
            return score
    except Exception:  # noqa: S110 - another model layout: the library's own path is right
        pass
    return None


def find_offensive(
    texts: Sequence[str], *, profanity: bool = True, toxicity: bool = True
) -> list[list[Hit]]:
    """The offensive spans of each text, with one model call for all of them."""
    results: list[list[Hit]] = [[] for _ in texts]
    if not (profanity or toxicity):
        return results
    segments = [(i, start, end) for i, text in enumerate(texts) for start, end in _segments(text)]
    masked = [_mask(texts[index][start:end]) for index, start, end in segments]
    words, known, pending = _segment_words(segments, masked) if profanity else ([], {}, set())
    # One model call: every segment with words left after masking, then the words not seen yet.
    scored_segments = [text for text in masked if text.strip()]
    new_words = sorted(pending)
    items = scored_segments + new_words
    scores = [float(s) for s in load_classifier()(items)] if items else []
    fresh = dict(zip(new_words, scores[len(scored_segments) :], strict=True))
    known.update(fresh)
    if len(_word_scores) + len(fresh) > _WORD_CACHE_SIZE:
        _word_scores.clear()
    _word_scores.update(fresh)
    segment_scores = iter(scores[: len(scored_segments)])

    for number, (index, start, end) in enumerate(segments):
        score = next(segment_scores) if masked[number].strip() else 0.0
        text = texts[index]
        if toxicity and score >= TOXICITY_THRESHOLD and _SECOND_PERSON.search(text, start, end):
            results[index].append(Hit(start, end, TOXICITY, round(score, 4)))
        if profanity:
            flagged = [
                Hit(w_start, w_end, PROFANITY, round(known[word], 4))
                for w_start, w_end, word in words[number]
                if known[word] >= WORD_THRESHOLD
                or (score >= SENTENCE_THRESHOLD and known[word] >= SENTENCE_THRESHOLD)
            ]
            if not flagged and score >= SENTENCE_THRESHOLD:
                flagged = [Hit(start, end, PROFANITY, round(score, 4))]
            results[index].extend(flagged)
    if toxicity:
        for index, text in enumerate(texts):
            for kind, name, pattern in PATTERNS:
                results[index].extend(
                    Hit(m.start(), m.end(), kind, None, name) for m in pattern.finditer(text)
                )
    for hits in results:
        hits.sort(key=lambda hit: (hit.start, hit.end, hit.kind, hit.detail))
    return results


def _segment_words(
    segments: list[tuple[int, int, int]], masked: list[str]
) -> tuple[list[list[tuple[int, int, str]]], dict[str, float], set[str]]:
    """Each segment's words with their place in its text; the scores of the words scored
    before (copied: another thread may clear the cache); the words not scored yet."""
    words: list[list[tuple[int, int, str]]] = []
    known: dict[str, float] = {}
    pending: set[str] = set()
    for (_, start, _), text in zip(segments, masked, strict=True):
        found = [
            (start + m.start(), start + m.end(), m.group().lower()) for m in _WORD.finditer(text)
        ]
        words.append(found)
        for _, _, word in found:
            cached = _word_scores.get(word)
            if cached is None:
                pending.add(word)
            else:
                known[word] = cached
    return words, known, pending


def _segments(text: str) -> list[tuple[int, int]]:
    """Sentence-like stretches of `text`, trimmed, none longer than _MAX_SEGMENT."""
    found = []
    for match in _SEGMENT.finditer(text):
        start, end = match.span()
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        while end - start > _MAX_SEGMENT:
            cut = text.rfind(" ", start, start + _MAX_SEGMENT)
            cut = cut if cut > start else start + _MAX_SEGMENT
            found.append((start, cut))
            start = cut + 1 if text[cut : cut + 1] == " " else cut
        if end > start and any(char.isalpha() for char in text[start:end]):
            found.append((start, end))
    return found


def _mask(segment: str) -> str:
    """The segment with identity terms blanked out, keeping every other character's place."""
    return _WORD.sub(
        lambda m: " " * len(m.group()) if m.group().lower() in IDENTITY_TERMS else m.group(),
        segment,
    )
