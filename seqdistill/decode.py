"""Decoding in numpy: word scores to tags, entity spans and span scores, for every runtime.

Decision, named here: decoding is not in the ONNX graph. Every model (a torch student or teacher,
or an exported ONNX graph) stops at word-level scores, and this one small decoder turns them into
tags, so that a model decodes the same way whatever runs it. Three decoders:

* ``crf`` — Viterbi over the CRF's effective transitions (``-inf`` where the tag scheme forbids a
  move, as ``seqdistill.crf.CRF.scores`` gives them): the best path, as ``CRF.decode``;
* ``argmax`` — the best tag of each word (softmax heads: XtremeDistil and SenTScore students,
  softmax teachers);
* ``bilou`` — one BILOU layer per entity type (paper 003), each the Viterbi path of the BILOU
  automaton over the layer's log-softmax (``seqdistill.bilou``); nested spans across types, and
  flat tags of the outermost spans.

Viterbi is vectorised over the batch; the only Python loop is over time (a sentence of 30 words
is 29 numpy steps; docs/BENCHMARKS.md measures its cost). Ties go to the lowest tag id, as in
``seqdistill.crf``.

A span's score is the mean, over its words, of the model's probability of the tag it chose there:
the CRF marginal p(y_t | x) by forward-backward, the softmax probability, or the BILOU layer's
softmax probability. A decoder's ``temperature`` T (fitted on dev by ``deploy.calibration``,
stored in the model directory) divides every score before those probabilities (a CRF's
transitions too: the whole potential); the tags are the model's own, decoded at T = 1, so
calibrating confidence never changes a prediction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .bilou import flatten_spans, spans_from_layers
from .cache_schema.labels import LabelSchema, spans_to_tags, tags_to_spans

DECODERS = ("crf", "argmax", "bilou")


def viterbi(
    emissions: np.ndarray, lengths: np.ndarray, transitions: np.ndarray, start: np.ndarray, end: np.ndarray
) -> np.ndarray:
    """Best tag path ``[B, L]`` (-1 past each sentence) of scores
    ``S(y) = start[y_1] + sum_t E[t, y_t] + sum_t A[y_{t-1}, y_t] + end[y_n]`` (paper 000, eq. 1).

    Written for few numpy calls a step (at batch 1 the per-call overhead, not arithmetic, is the
    cost): until the shortest sentence ends no step needs a mask."""
    emissions = emissions.astype(np.float32, copy=False)
    B, L, T = emissions.shape
    delta = start + emissions[:, 0]
    all_live = int(lengths.min())
    stay = np.broadcast_to(np.arange(T), (B, T))
    back = []
    for t in range(1, L):
        cand = delta[:, :, None] + transitions  # [B, prev, next]
        best = cand.argmax(1)
        top = cand.max(1) + emissions[:, t]
        if t < all_live:
            delta = top
        else:
            live = (t < lengths)[:, None]
            delta = np.where(live, top, delta)
            best = np.where(live, best, stay)
        back.append(best)
    rows = np.arange(B)
    cur = (delta + end).argmax(1)
    paths = np.empty((B, L), dtype=np.int64)
    paths[:, L - 1] = cur
    for t in range(L - 1, 0, -1):
        cur = back[t - 1][rows, cur]
        paths[:, t - 1] = cur
    if all_live < L:
        paths[np.arange(L) >= lengths[:, None]] = -1
    return paths


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    return np.squeeze(m, axis) + np.log(np.sum(np.exp(x - m), axis=axis))


def crf_marginals(
    emissions: np.ndarray, lengths: np.ndarray, transitions: np.ndarray, start: np.ndarray, end: np.ndarray
) -> np.ndarray:
    """p(y_t = y | x) by forward-backward in log space, ``[B, L, T]`` (0 past each sentence);
    as ``seqdistill.crf.marginals``."""
    emissions = emissions.astype(np.float64)
    transitions, start, end = (a.astype(np.float64) for a in (transitions, start, end))
    B, L, T = emissions.shape
    alphas = [start[None] + emissions[:, 0]]
    for t in range(1, L):
        nxt = _logsumexp(alphas[-1][:, :, None] + transitions[None], 1) + emissions[:, t]
        alphas.append(np.where((t < lengths)[:, None], nxt, alphas[-1]))
    log_z = _logsumexp(alphas[-1] + end[None], 1)
    betas = [np.broadcast_to(end, (B, T))]
    for t in range(L - 2, -1, -1):
        nxt = _logsumexp(transitions[None] + (emissions[:, t + 1] + betas[0])[:, None, :], 2)
        betas.insert(0, np.where((t + 1 < lengths)[:, None], nxt, end[None]))
    probs = np.exp(np.stack(alphas, 1) + np.stack(betas, 1) - log_z[:, None, None])
    return probs * (np.arange(L)[None] < lengths[:, None])[:, :, None]


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32, copy=False)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


@dataclass
class Decoded:
    """One sentence: its flat tags, its ``(start, end, type)`` spans (nested across types for a
    ``bilou`` model, end exclusive; None when not asked for) and a score per span (None when not
    asked for)."""

    tags: list[str]
    spans: list[tuple[int, int, str]] | None
    scores: list[float] | None


@dataclass
class Decoder:
    """How a model's word scores become tags: ``kind`` (one of ``DECODERS``), the label schema,
    the transitions (``crf``: the CRF's; ``bilou``: the automaton's), and the entity types of a
    ``bilou`` model's layers."""

    kind: str
    schema: LabelSchema
    transitions: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    entity_types: tuple[str, ...] = ()
    temperature: float = 1.0  # divides the scores of span probabilities only (module docstring)

    def __post_init__(self):
        if self.kind not in DECODERS:
            raise ValueError(f"decoder {self.kind!r} is not one of {', '.join(DECODERS)}")
        if self.kind in ("crf", "bilou") and self.transitions is None:
            raise ValueError(f"a {self.kind} decoder needs its transitions")
        if self.transitions is not None:
            self.transitions = tuple(np.asarray(a, dtype=np.float32) for a in self.transitions)

    @property
    def nested(self) -> bool:
        return self.kind == "bilou"

    def __call__(
        self, scores: np.ndarray, lengths: np.ndarray, with_scores: bool = False, with_spans: bool = True
    ) -> list[Decoded]:
        """``scores``: ``[B, L, T]`` emissions or logits, or ``[B, L, E, 5]`` BILOU logits. Flat
        models read their spans off the tags only when asked (``with_spans``; always with scores)."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if self.kind == "bilou":
            return self._bilou(scores, lengths, with_scores)
        if self.kind == "crf":
            ids = viterbi(scores, lengths, *self.transitions)
            t = self.temperature
            probs = crf_marginals(scores / t, lengths, *(a / t for a in self.transitions)) if with_scores else None
        else:
            ids = scores.argmax(-1)
            probs = softmax(scores.astype(np.float32) / self.temperature) if with_scores else None
        out = []
        for b, n in enumerate(lengths.tolist()):
            tags = self.schema.decode(ids[b, :n].tolist())
            spans = tags_to_spans(tags, self.schema.scheme) if with_spans or with_scores else None
            span_scores = None
            if probs is not None:
                chosen = probs[b, np.arange(n), ids[b, :n]]
                span_scores = [float(chosen[s:e].mean()) for s, e, _ in spans]
            out.append(Decoded(tags, spans, span_scores))
        return out

    def layers(self, logits: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Per-type BILOU tag ids ``[B, L, E]`` (-1 past each sentence), as ``bilou.decode_layers``."""
        B, L, E, C = logits.shape
        if C != 5 or E != len(self.entity_types):
            raise ValueError(f"BILOU logits of shape {logits.shape} do not fit {len(self.entity_types)} types x 5 tags")
        emissions = log_softmax(logits).transpose(0, 2, 1, 3).reshape(B * E, L, 5)
        paths = viterbi(emissions, np.repeat(lengths, E), *self.transitions)
        return paths.reshape(B, E, L).transpose(0, 2, 1)

    def _bilou(self, logits: np.ndarray, lengths: np.ndarray, with_scores: bool) -> list[Decoded]:
        layers = self.layers(logits, lengths)
        probs = softmax(logits.astype(np.float32) / self.temperature) if with_scores else None
        index = {t: i for i, t in enumerate(self.entity_types)}
        out = []
        for b, n in enumerate(lengths.tolist()):
            spans = spans_from_layers(layers[b, :n].tolist(), list(self.entity_types))
            tags = spans_to_tags(flatten_spans(spans), n, self.schema.scheme)
            span_scores = None
            if probs is not None:
                span_scores = []
                for s, e, t in spans:
                    k = index[t]
                    span_scores.append(float(probs[b, np.arange(s, e), k, layers[b, s:e, k]].mean()))
            out.append(Decoded(tags, spans, span_scores))
        return out


# -- the decoders of torch models -------------------------------------------------------------------
def as_arrays(tensors) -> tuple[np.ndarray, ...]:
    """Decoding tables (transitions, start, end) of a torch model as float32 numpy arrays."""
    return tuple(t.detach().float().cpu().numpy() for t in tensors)


def crf_decoder(schema: LabelSchema, crf) -> Decoder:
    """Viterbi over a ``seqdistill.crf.CRF``'s effective transitions."""
    return Decoder("crf", schema, as_arrays(crf.scores()))


def bilou_decoder(schema: LabelSchema, entity_types) -> Decoder:
    """One BILOU automaton's Viterbi per entity type (paper 003)."""
    from .bilou import transition_scores

    return Decoder("bilou", schema, as_arrays(transition_scores()), tuple(entity_types))


def argmax_decoder(schema: LabelSchema) -> Decoder:
    """The best tag of each word (softmax heads)."""
    return Decoder("argmax", schema)
