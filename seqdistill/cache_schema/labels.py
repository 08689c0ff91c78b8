"""Tag schemes and the label schema of a cache.

The label schema (scheme, entity types, the ordered tag list) is part of the cache contract:
teacher k-best paths and logits index into ``LabelSchema.tags``. It lives in ``cache_schema``
rather than ``pipeline`` because students need the same rules (which transitions a scheme allows,
how tags become spans) and students may import ``cache_schema`` but not ``pipeline``.

Schemes:

* ``IOB1`` – ``I-X`` inside an entity; ``B-X`` only starts an entity that directly follows another
  entity of the same type (CoNLL-2003's original encoding).
* ``IOB2`` – every entity starts with ``B-X``, continues with ``I-X``.
* ``BIOES`` – ``B``/``I``/``E`` for multi-word entities, ``S`` for single words.
* ``BILOU`` – BIOES under other names: ``L`` = last, ``U`` = unit.
* ``sBIO`` – the SenTScore scheme (paper 004): the bare type (``PER``) on the first word, ``I`` on
  the rest, ``O`` outside.
* ``BMES`` – BIOES under the names Chinese NER corpora use: ``M`` = middle (BIOES's ``I``), ``S``
  single; ``O`` outside.
* ``BMEWO`` – BMES with ``W`` (single word) where BMES has ``S``.

Each tag is reduced to a *role* (``O``, ``B``, ``I``, ``E``, ``S``) and a type; the validity rules
and the span decoding are written once over roles. BIOES, BILOU, BMES and BMEWO are one scheme
under four spellings (an entity is closed explicitly by ``E`` or ``S``), so they share every rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SCHEMES = ("IOB1", "IOB2", "BIOES", "BILOU", "sBIO", "BMES", "BMEWO")

# Prefix letter -> normalised role, per scheme (sBIO has no prefixes; handled apart).
_PREFIX_ROLES = {
    "IOB1": {"B": "B", "I": "I"},
    "IOB2": {"B": "B", "I": "I"},
    "BIOES": {"B": "B", "I": "I", "E": "E", "S": "S"},
    "BILOU": {"B": "B", "I": "I", "L": "E", "U": "S"},
    "BMES": {"B": "B", "M": "I", "E": "E", "S": "S"},
    "BMEWO": {"B": "B", "M": "I", "E": "E", "W": "S"},
}

# Schemes whose entities end explicitly (``E`` or ``S`` role): BIOES under its four spellings.
_CLOSED = ("BIOES", "BILOU", "BMES", "BMEWO")


class TagError(ValueError):
    """A tag or tag sequence that the scheme does not allow."""


@dataclass(frozen=True)
class Tag:
    role: str  # O, B, I, E or S
    type: str | None  # entity type; None for O (and for sBIO's bare I)


def canonical_scheme(name: str) -> str:
    """Return the canonical spelling of a scheme name (case-insensitive), or raise."""
    for s in SCHEMES:
        if s.lower() == name.lower():
            return s
    raise TagError(f"unknown tag scheme {name!r}: choose one of {', '.join(SCHEMES)}")


def parse_tag(tag: str, scheme: str) -> Tag:
    """Parse one tag string under ``scheme``; raise :class:`TagError` if it is ill-formed."""
    if tag == "O":
        return Tag("O", None)
    if scheme == "sBIO":
        if tag == "I":
            return Tag("I", None)
        if not tag or "-" in tag[:2] or tag.strip() != tag:
            raise TagError(f"ill-formed sBIO tag {tag!r}: expected 'O', 'I' or a bare entity type")
        return Tag("B", tag)
    prefix, sep, etype = tag.partition("-")
    roles = _PREFIX_ROLES[scheme]
    if not sep or prefix not in roles or not etype:
        allowed = "/".join(roles)
        raise TagError(f"ill-formed {scheme} tag {tag!r}: expected 'O' or '{allowed}-TYPE'")
    return Tag(roles[prefix], etype)


def format_tag(t: Tag, scheme: str) -> str:
    """Inverse of :func:`parse_tag`."""
    if t.role == "O":
        return "O"
    if scheme == "sBIO":
        return t.type if t.role == "B" else "I"
    letter = {v: k for k, v in _PREFIX_ROLES[scheme].items()}[t.role]
    return f"{letter}-{t.type}"


# -- validity rules over roles ------------------------------------------------------------------


def _start_ok(t: Tag, scheme: str) -> bool:
    if scheme == "IOB1":
        return t.role != "B"
    if scheme == "IOB2":
        return t.role in ("O", "B")
    if scheme in _CLOSED:
        return t.role in ("O", "B", "S")
    return t.role != "I"  # sBIO


def _end_ok(t: Tag, scheme: str) -> bool:
    if scheme in _CLOSED:
        return t.role in ("O", "E", "S")
    return True


def _transition_ok(a: Tag, b: Tag, scheme: str) -> bool:
    if scheme == "IOB1":
        return b.role != "B" or (a.role in ("B", "I") and a.type == b.type)
    if scheme == "IOB2":
        return b.role != "I" or (a.role in ("B", "I") and a.type == b.type)
    if scheme in _CLOSED:
        if a.role in ("B", "I"):
            return b.role in ("I", "E") and a.type == b.type
        return b.role in ("O", "B", "S")
    return b.role != "I" or a.role in ("B", "I")  # sBIO


def check_sequence(tags: list[str], scheme: str) -> tuple[int, str] | None:
    """Return ``(position, reason)`` of the first violation of ``scheme`` in ``tags``, or None."""
    parsed = []
    for i, tag in enumerate(tags):
        try:
            parsed.append(parse_tag(tag, scheme))
        except TagError as e:
            return i, str(e)
    for i, t in enumerate(parsed):
        if i == 0 and not _start_ok(t, scheme):
            return 0, f"a sentence cannot start with {tags[0]!r} in {scheme}"
        if i > 0 and not _transition_ok(parsed[i - 1], t, scheme):
            return i, f"{tags[i - 1]!r} cannot be followed by {tags[i]!r} in {scheme}"
    if parsed and not _end_ok(parsed[-1], scheme):
        return len(tags) - 1, f"a sentence cannot end with {tags[-1]!r} in {scheme}"
    return None


# -- spans and conversion -------------------------------------------------------------------------


def tags_to_spans(tags: list[str], scheme: str) -> list[tuple[int, int, str]]:
    """Entities of a valid sequence as ``(start, end_exclusive, type)`` spans."""
    parsed = [parse_tag(t, scheme) for t in tags]
    spans: list[tuple[int, int, str]] = []
    start, etype = None, None

    def close(end: int) -> None:
        nonlocal start, etype
        if start is not None:
            spans.append((start, end, etype))
        start, etype = None, None

    for i, t in enumerate(parsed):
        if t.role == "O":
            close(i)
            continue
        continues = start is not None and t.role in ("I", "E") and (scheme == "sBIO" or t.type == etype)
        if not continues:
            close(i)
            start, etype = i, t.type
        if t.role in ("E", "S"):
            close(i + 1)
    close(len(parsed))
    return spans


def spans_to_tags(spans: list[tuple[int, int, str]], length: int, scheme: str) -> list[str]:
    """Encode non-overlapping spans as a tag sequence of ``length`` under ``scheme``."""
    out = [Tag("O", None)] * length
    prev_end, prev_type = -1, None
    for start, end, etype in sorted(spans):
        if not (0 <= start < end <= length):
            raise TagError(f"span {(start, end, etype)} does not fit a sentence of {length} words")
        n = end - start
        if scheme == "IOB1":
            first = "B" if (prev_end == start and prev_type == etype) else "I"
            roles = [first] + ["I"] * (n - 1)
        elif scheme in ("IOB2", "sBIO"):
            roles = ["B"] + ["I"] * (n - 1)
        else:
            roles = ["S"] if n == 1 else ["B"] + ["I"] * (n - 2) + ["E"]
        for j, r in enumerate(roles):
            out[start + j] = Tag(r, None if (scheme == "sBIO" and r == "I") else etype)
        prev_end, prev_type = end, etype
    return [format_tag(t, scheme) for t in out]


def convert_tags(tags: list[str], source: str, target: str) -> list[str]:
    """Convert a valid tag sequence between schemes (through its spans)."""
    problem = check_sequence(tags, source)
    if problem is not None:
        raise TagError(f"position {problem[0]}: {problem[1]}")
    return spans_to_tags(tags_to_spans(tags, source), len(tags), target)


def detect_scheme(sequences: list[list[str]]) -> str:
    """Guess the scheme of a labelled corpus from its tags.

    Decision (documented in docs/cache-format.md): bare non-``O`` tags mean sBIO, ``W-`` BMEWO,
    ``M-`` BMES, ``S-``/``E-`` BIOES, ``U-``/``L-`` BILOU (first match in this order); otherwise
    IOB1 when some entity opens with ``I-`` (at the start, after ``O`` or after another type) and
    no ``B-`` appears where IOB1 forbids it, else IOB2 (so an IOB2 file with a stray ``O I-X`` is
    reported as an error, not read as IOB1). A BMES or BMEWO corpus without ``M-`` (no entity
    longer than two words) and without ``W-`` reads as BIOES: its tags are the same strings and
    the same spans under either name. Prefixes of two spellings (``M-`` with ``I-``, ``W-`` with
    ``S-``) are not guessed apart: the corpus is read in the first scheme of the order above and
    its first tag of the other spelling is reported as ill-formed, by name.
    """
    guess = SchemeGuess()
    for tags in sequences:
        guess.add(tags)
    return guess.scheme()


class SchemeGuess:
    """:func:`detect_scheme` one sequence at a time (a corpus read as a stream adds its sentences
    as they come, ``corpora/stream.py``)."""

    def __init__(self) -> None:
        self.prefixes: set[str] = set()
        self.opens_with_i = self.b_outside_iob1 = False

    def add(self, tags: list[str]) -> None:
        prev = "O"
        for t in tags:
            if t != "O":
                self.prefixes.add(t.split("-", 1)[0] if "-" in t else "")
                opens_entity = prev == "O" or prev[2:] != t[2:]
                self.opens_with_i |= t.startswith("I-") and opens_entity
                self.b_outside_iob1 |= t.startswith("B-") and opens_entity
            prev = t

    def scheme(self) -> str:
        prefixes = self.prefixes
        if "" in prefixes:
            return "sBIO"
        if "W" in prefixes:
            return "BMEWO"
        if "M" in prefixes:
            return "BMES"
        if prefixes & {"S", "E"}:
            return "BIOES"
        if prefixes & {"U", "L"}:
            return "BILOU"
        return "IOB1" if self.opens_with_i and not self.b_outside_iob1 else "IOB2"


# -- the label schema -------------------------------------------------------------------------------

_ROLE_ORDER = {
    "IOB1": ("B", "I"),
    "IOB2": ("B", "I"),
    "BIOES": ("B", "I", "E", "S"),
    "BILOU": ("B", "I", "E", "S"),
    "BMES": ("B", "I", "E", "S"),
    "BMEWO": ("B", "I", "E", "S"),
}


@dataclass(frozen=True)
class LabelSchema:
    """The tag set of a cache: ``tags[i]`` is the tag whose id is ``i``.

    The order is fixed by the scheme and the sorted entity types: ``O`` first, then for each type
    its tags in scheme order (``B, I`` / ``B, I, E, S`` / ``B, I, L, U`` / ``B, M, E, S`` /
    ``B, M, E, W``); sBIO lists ``O``, ``I``, then the bare types. The full tag set of the scheme
    is included even for tags a corpus never uses, so every model built on the schema can express
    every valid sequence.
    """

    scheme: str
    entity_types: tuple[str, ...]
    tags: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "scheme", canonical_scheme(self.scheme))
        object.__setattr__(self, "entity_types", tuple(sorted(set(self.entity_types))))
        expected = self._derive_tags()
        if self.tags and tuple(self.tags) != expected:
            raise TagError(
                f"label schema tags {list(self.tags)} do not match scheme {self.scheme} with types "
                f"{list(self.entity_types)} (expected {list(expected)})"
            )
        object.__setattr__(self, "tags", expected)

    def _derive_tags(self) -> tuple[str, ...]:
        if self.scheme == "sBIO":
            return ("O", "I", *self.entity_types)
        tags = ["O"]
        for etype in self.entity_types:
            for role in _ROLE_ORDER[self.scheme]:
                tags.append(format_tag(Tag(role, etype), self.scheme))
        return tuple(tags)

    @property
    def num_tags(self) -> int:
        return len(self.tags)

    def tag_to_id(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.tags)}

    def encode(self, tags: list[str]) -> list[int]:
        index = self.tag_to_id()
        try:
            return [index[t] for t in tags]
        except KeyError as e:
            raise TagError(f"tag {e.args[0]!r} is not in the label schema {list(self.tags)}") from None

    def decode(self, ids) -> list[str]:
        out = []
        for i in ids:
            if not 0 <= int(i) < len(self.tags):
                raise TagError(f"tag id {int(i)} is outside the label schema (0..{len(self.tags) - 1})")
            out.append(self.tags[int(i)])
        return out

    def allowed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Boolean masks ``(start[T], transitions[T, T], end[T])`` of what the scheme allows.

        ``transitions[i, j]`` is True when tag ``j`` may follow tag ``i``. A CRF sets the scores of
        the forbidden entries to -inf, so that no decoded path is invalid.
        """
        parsed = [parse_tag(t, self.scheme) for t in self.tags]
        start = np.array([_start_ok(t, self.scheme) for t in parsed])
        end = np.array([_end_ok(t, self.scheme) for t in parsed])
        trans = np.array([[_transition_ok(a, b, self.scheme) for b in parsed] for a in parsed])
        return start, trans, end

    def to_json(self) -> dict:
        return {"scheme": self.scheme, "entity_types": list(self.entity_types), "tags": list(self.tags)}

    @classmethod
    def from_json(cls, obj: dict) -> "LabelSchema":
        return cls(obj["scheme"], tuple(obj["entity_types"]), tuple(obj.get("tags", ())))

    @classmethod
    def from_sequences(cls, sequences: list[list[str]], scheme: str | None = None) -> "LabelSchema":
        """Derive the schema of labelled sequences (scheme detected when not given)."""
        scheme = canonical_scheme(scheme) if scheme else detect_scheme(sequences)
        types = {parse_tag(t, scheme).type for tags in sequences for t in tags}
        return cls(scheme, tuple(t for t in types if t is not None))
