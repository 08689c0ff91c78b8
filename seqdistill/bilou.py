"""One BILOU tag layer per entity type (paper 003, issue 9): nested entities as parallel flat layers.

Each entity type e gets its own sequence of tags over ``BILOU_TAGS`` (O, B, I, L, U). An entity of
type e over words [start, end) is ``U`` when it has one word, else ``B I ... I L``. Entities of
*different* types may overlap or nest freely (they live in different layers); two entities of the
same type may not overlap (one layer cannot hold both), and :func:`layers_from_spans` refuses them.

Decoding (Fig. 2 of the paper): Viterbi over the BILOU automaton of a layer, with the allowed
transitions equiprobable (log 1/n from a state with n successors), the forbidden ones impossible,
and the model's per-word log-softmax as emissions. A sequence may start with O, B or U and end
with O, L or U, so the decoder never emits an invalid layer.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .crf import viterbi

BILOU_TAGS = ("O", "B", "I", "L", "U")
O, B, I, L, U = range(5)  # noqa: E741 (the BILOU tags' own names)
_NEXT = {O: (O, B, U), B: (I, L), I: (I, L), L: (O, B, U), U: (O, B, U)}
_FIRST, _LAST = (O, B, U), (O, L, U)


def transition_scores(device=None) -> tuple[Tensor, Tensor, Tensor]:
    """(transitions ``[5, 5]``, start ``[5]``, end ``[5]``) in log space: allowed moves
    equiprobable, forbidden ones -inf (the paper's Fig. 2)."""
    trans = torch.full((5, 5), -math.inf, device=device)
    for a, nxt in _NEXT.items():
        for b in nxt:
            trans[a, b] = -math.log(len(nxt))
    start = torch.full((5,), -math.inf, device=device)
    start[list(_FIRST)] = -math.log(len(_FIRST))
    end = torch.full((5,), -math.inf, device=device)
    end[list(_LAST)] = 0.0
    return trans, start, end


def is_valid(tags: list[int]) -> bool:
    """A layer is valid when it starts with O/B/U, follows the automaton and ends with O/L/U."""
    if not tags:
        return True
    return tags[0] in _FIRST and tags[-1] in _LAST and all(b in _NEXT[a] for a, b in zip(tags, tags[1:]))


def decode_layers(logits: Tensor, mask: Tensor) -> Tensor:
    """Best valid BILOU layer per entity type: ``logits [B, L, E, 5]`` -> tag ids ``[B, L, E]``
    (-1 past each sentence)."""
    Bsz, Lmax, E, C = logits.shape
    if C != 5:
        raise ValueError(f"BILOU layers have 5 tags, the logits have {C}")
    emissions = torch.log_softmax(logits.float(), -1).permute(0, 2, 1, 3).reshape(Bsz * E, Lmax, 5)
    m = mask.repeat_interleave(E, 0)
    trans, start, end = transition_scores(logits.device)
    paths, _ = viterbi(emissions, m, trans, start, end)
    return paths.view(Bsz, E, Lmax).permute(0, 2, 1).masked_fill(~mask.unsqueeze(-1), -1)


def layers_from_spans(
    spans: list[tuple[int, int, str]], length: int, types: list[str], where: str = ""
) -> list[list[int]]:
    """Per-type BILOU tag ids ``[length][len(types)]`` from ``(start, end, type)`` spans (end
    exclusive). Raises for an unknown type, a span outside the sentence, or two entities of one
    type that overlap."""
    layers = [[O] * length for _ in types]
    index = {t: i for i, t in enumerate(types)}
    for start, end, etype in spans:
        if etype not in index:
            raise ValueError(f"{where}entity type {etype!r} is not one of {', '.join(types)}")
        if not 0 <= start < end <= length:
            raise ValueError(f"{where}entity [{start}, {end}) {etype} is outside the sentence's {length} words")
        layer = layers[index[etype]]
        if any(t != O for t in layer[start:end]):
            raise ValueError(
                f"{where}two {etype} entities overlap at [{start}, {end}): one BILOU layer per type "
                "holds non-overlapping entities of that type"
            )
        if end - start == 1:
            layer[start] = U
        else:
            layer[start], layer[end - 1] = B, L
            for i in range(start + 1, end - 1):
                layer[i] = I
    return [[layers[e][i] for e in range(len(types))] for i in range(length)]


def layers_from_tags(tags: list[str], scheme: str, types: list[str]) -> list[list[int]]:
    """Per-type BILOU layers of a flat tag sequence (through its entity spans)."""
    from .cache_schema.labels import tags_to_spans

    return layers_from_spans(tags_to_spans(tags, scheme), len(tags), types)


def spans_from_layers(tags: list[list[int]], types: list[str]) -> list[tuple[int, int, str]]:
    """``(start, end, type)`` spans of per-type BILOU tag ids ``[length][types]``, sorted. Invalid
    pieces are read leniently: an entity opened by B (or a stray I) closes at L, at O, or where a
    new B/U begins; a lone L is a one-word span."""
    spans = []
    for e, etype in enumerate(types):
        start = None
        for i, row in enumerate(tags):
            t = row[e]
            if t in (B, U) and start is not None:  # a new entity while one is open: close that one first
                spans.append((start, i, etype))
                start = None
            if t == U:
                spans.append((i, i + 1, etype))
                start = None
            elif t == B or (t in (I, L) and start is None):
                start = i
                if t == L:
                    spans.append((i, i + 1, etype))
                    start = None
            elif t == L and start is not None:
                spans.append((start, i + 1, etype))
                start = None
            elif t == O and start is not None:
                spans.append((start, i, etype))
                start = None
        if start is not None:
            spans.append((start, len(tags), etype))
    return sorted(spans)


def flatten_spans(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """The non-overlapping subset of possibly nested spans that a flat tag sequence can hold:
    spans by start, the longer first, and a span overlapping one already kept is dropped (the
    outermost entity wins: "[Bank of [England]LOC]ORG" keeps the ORG)."""
    kept, end = [], -1
    for s in sorted(spans, key=lambda x: (x[0], x[0] - x[1], x[2])):
        if s[0] >= end:
            kept.append(tuple(s))
            end = s[1]
    return kept


def flatten_layers(layers: Tensor, mask: Tensor, types: list[str], schema) -> Tensor:
    """Per-type layers ``[B, L, E]`` as flat tag ids of ``schema`` ``[B, L]`` (-1 past the end),
    for flat evaluation and prediction (``flatten_spans``: a flat tag sequence cannot hold nested
    entities)."""
    from .cache_schema.labels import spans_to_tags

    flat = torch.full(mask.shape, -1, dtype=torch.long)
    for b in range(layers.shape[0]):
        n = int(mask[b].sum())
        spans = flatten_spans(spans_from_layers(layers[b, :n].tolist(), types))
        flat[b, :n] = torch.tensor(schema.encode(spans_to_tags(spans, n, schema.scheme)))
    return flat


def predicted_spans(layers: Tensor, mask: Tensor, types: list[str]) -> list[list[tuple[int, int, str]]]:
    """Each sentence's ``(start, end, type)`` spans of decoded per-type layers ``[B, L, E]``:
    nested across types, as the paper's per-type evaluation reads them."""
    return [spans_from_layers(layers[b, : int(mask[b].sum())].tolist(), types) for b in range(layers.shape[0])]


def span_layer_marginals(phi: Tensor, lengths: Tensor) -> Tensor:
    """Each entity type's own BILOU marginals ``[B, L, C, 5]`` from span potentials ``phi``
    ``[B, L, W, C]`` (``semicrf.py``, S1): a span teacher's per-type targets (issue 82).

    Type c is read alone, as a span model scores it (GLiNER scores each type with its own sigmoid):
    a semi-CRF over the segmentations of the sentence into spans of type c and outside words, whose
    span marginals mu_c(i, w) (S6) give, at word t,

        U = mu_c(t, 1 word)        B = sum over spans of 2+ words starting at t
        L = sum over spans of 2+ words ending at t
        I = the spans covering t after their first word, less L      O = outside

    which sum to 1. Types are independent, so spans of different types may overlap, as one BILOU
    layer per type allows (the flat semi-CRF of the cache's paths lets them compete instead).
    Zero past a sentence's end."""
    from . import semicrf

    Bsz, Lmax, W, C = phi.shape
    lengths = lengths.to(phi.device)
    # every (sentence, type) its own one-type semi-CRF: the types folded into the batch, one call
    m = semicrf.marginals(phi.permute(0, 3, 1, 2).reshape(Bsz * C, Lmax, W, 1), lengths.repeat_interleave(C))
    spans = m.spans[..., 0]  # [B*C, L, W]: mu_c(i, w)
    last = torch.zeros_like(spans[..., 0])
    for w in range(1, min(W, Lmax)):
        last[:, w:] += spans[:, : Lmax - w, w]  # a span of w + 1 words starting at t - w ends at t
    outside, inside = m.tags[..., 0], m.tags[..., 2]
    layers = torch.stack([outside, spans[..., 1:].sum(-1), inside - last, last, spans[..., 0]], -1)
    live = torch.arange(Lmax, device=phi.device)[None, :] < lengths[:, None]  # [B, L]
    return layers.view(Bsz, C, Lmax, 5).transpose(1, 2) * live[:, :, None, None]
