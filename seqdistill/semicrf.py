"""A semi-Markov CRF over flat segmentations: log Z, span and BIO marginals, k-best BIO paths.

What it reads (issue 71): a span model such as GLiNER scores every candidate span ``(i, w)`` (start
word ``i``, ``w + 1`` words, ``w < W``) against every entity type ``c`` with an independent
sigmoid, ``p(i, w, c) = sigmoid(l(i, w, c))``. Read as potentials of a semi-Markov CRF (Sarawagi
and Cohen, 2004) over the flat segmentations of a sentence, where a segment is an entity span with
one type or a single word outside every entity,

    phi(i, w, c) = (l(i, w, c) + b) / T        an entity span; phi(O) = 0 for a word outside   (S1)
    S(y) = sum_{segments s of y} phi(s)                                                          (S2)
    p(y | x) = exp(S(y) - log Z(x)),   log Z(x) = logsumexp_y S(y)                              (S3)

With ``b = 0`` and ``T = 1``, (S3) is exactly the model's own independent-sigmoid distribution
over (span, type) pairs conditioned on the chosen spans forming a flat segmentation: each chosen
span multiplies the all-outside configuration's probability by ``p / (1 - p) = exp(l)``. A bias
``b = -logit(threshold)`` makes a span worth choosing exactly where the model's own decoder keeps
it (``p > threshold``); ``T`` softens or sharpens the distribution.

Every flat segmentation whose spans are at most ``W`` words is one IOB2 path (an entity span is
``B-c`` then ``I-c``, an outside word ``O``) and every IOB2 path whose entities are at most ``W``
words is one segmentation, so (S3) is a distribution over IOB2 paths: the k-best segmentations are
the k-best paths with their global probabilities, and the BIO marginals are sums of span marginals.
Tag ids follow :class:`~seqdistill.cache_schema.LabelSchema`'s IOB2 order over the types as
indexed here: ``O`` = 0, ``B-c`` = 1 + 2c, ``I-c`` = 2 + 2c.

Recursions (``alpha[t]``: log-sum of the segmentations of words ``0..t-1``; ``beta[t]`` of words
``t..n-1``; ``s(i, w) = logsumexp_c phi(i, w, c)``):

    alpha[0] = 0,  alpha[t] = logsumexp(alpha[t-1], logsumexp_{w < min(W, t)} alpha[t-w-1] + s(t-w-1, w))   (S4)
    beta[n] = 0,   beta[t] = logsumexp(beta[t+1], logsumexp_{w, t+w < n} s(t, w) + beta[t+w+1])            (S5)
    mu(i, w, c) = exp(alpha[i] + phi(i, w, c) + beta[i+w+1] - log Z)        span marginal                   (S6)
    mu_O(t) = exp(alpha[t] + beta[t+1] - log Z)                             outside marginal

Everything is batched over sentences (and over the K beams for k-best) with one Python loop over
words; scores are computed in float32 at least, outside autocast. Spans that run past a sentence's
end are never read for it. Checked against enumeration of every flat segmentation in
tests/test_semicrf.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

OUTSIDE = 0


def bio_tags(num_types: int) -> int:
    """The number of IOB2 tags over ``num_types`` types: O, then B and I of each."""
    return 1 + 2 * num_types


def _prepare(phi: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    dtype = torch.promote_types(phi.dtype, torch.float32)
    return phi.to(dtype), lengths.to(device=phi.device, dtype=torch.long)


def _starts(t: int, width: int, device) -> tuple[Tensor, Tensor]:
    """Start words ``t - w - 1`` of the spans of widths ``w = 0..width-1`` that end before word ``t``,
    clamped at 0, and which of them exist (start >= 0)."""
    starts = t - 1 - torch.arange(width, device=device)
    return starts.clamp(min=0), starts >= 0


def forward_scores(phi: Tensor, lengths: Tensor) -> Tensor:
    """``alpha`` of (S4) for every sentence: ``[B, L + 1]``, ``alpha[:, t]`` the log-sum over the
    segmentations of the first ``t`` words. ``phi``: ``[B, L, W, C]`` span potentials (S1)."""
    with torch.autocast(phi.device.type, enabled=False):
        phi, lengths = _prepare(phi, lengths)
        B, L, W, _ = phi.shape
        s = torch.logsumexp(phi, dim=-1)  # [B, L, W]
        alpha = [phi.new_zeros(B)]
        widths = torch.arange(W, device=phi.device)
        for t in range(1, L + 1):
            starts, ok = _starts(t, W, phi.device)
            prev = torch.stack([alpha[int(i)] for i in starts.tolist()], dim=1)  # [B, W]
            spans = prev + s[:, starts, widths]
            spans = spans.masked_fill(~ok, float("-inf"))
            alpha.append(torch.logsumexp(torch.cat([alpha[t - 1][:, None], spans], dim=1), dim=1))
        return torch.stack(alpha, dim=1)


def log_partition(phi: Tensor, lengths: Tensor) -> Tensor:
    """log Z(x) of (S3) for every sentence, ``[B]``."""
    alpha = forward_scores(phi, lengths)
    return alpha.gather(1, lengths.to(alpha.device, torch.long)[:, None]).squeeze(1)


def backward_scores(phi: Tensor, lengths: Tensor) -> Tensor:
    """``beta`` of (S5): ``[B, L + 1]``, ``beta[:, t]`` the log-sum over the segmentations of words
    ``t..n-1`` (0 at ``t = n``, -inf past the sentence)."""
    with torch.autocast(phi.device.type, enabled=False):
        phi, lengths = _prepare(phi, lengths)
        B, L, W, _ = phi.shape
        s = torch.logsumexp(phi, dim=-1)
        neg = phi.new_full((B,), float("-inf"))
        beta: list[Tensor] = [neg] * (L + 1)
        beta[L] = torch.where(lengths == L, 0.0, neg)
        for t in range(L - 1, -1, -1):
            ends = [t + w + 1 for w in range(W)]
            nxt = torch.stack([beta[e] if e <= L else neg for e in ends], dim=1)  # [B, W]
            spans = s[:, t, :] + nxt
            total = torch.logsumexp(torch.cat([beta[t + 1][:, None], spans], dim=1), dim=1)
            beta[t] = torch.where(lengths == t, 0.0, torch.where(lengths < t, neg, total))
        return torch.stack(beta, dim=1)


@dataclass
class Marginals:
    """Posterior marginals of (S6): of every span ``[B, L, W, C]``, of every word's IOB2 tag
    ``[B, L, 1 + 2C]`` (zero past a sentence), and log Z ``[B]``."""

    spans: Tensor
    tags: Tensor
    log_z: Tensor


def marginals(phi: Tensor, lengths: Tensor) -> Marginals:
    """Span and IOB2 tag marginals (S6) by forward-backward. A word's tag marginals sum to 1:
    ``B-c`` is the mass of the spans of type ``c`` starting at it, ``I-c`` of those covering it
    after their first word, ``O`` of the segmentations leaving it outside."""
    with torch.autocast(phi.device.type, enabled=False):
        phi, lengths = _prepare(phi, lengths)
        B, L, W, C = phi.shape
        alpha, beta = forward_scores(phi, lengths), backward_scores(phi, lengths)
        log_z = alpha.gather(1, lengths[:, None]).squeeze(1)
        ends = torch.arange(L, device=phi.device)[:, None] + torch.arange(W, device=phi.device)[None, :] + 1  # [L, W]
        beta_end = beta[:, ends.clamp(max=L)].masked_fill(ends > L, float("-inf"))  # [B, L, W]
        spans = torch.exp(alpha[:, :L, None, None] + phi + beta_end[..., None] - log_z[:, None, None, None])
        outside = torch.exp(alpha[:, :L] + beta[:, 1:] - log_z[:, None])  # [B, L]
        tags = phi.new_zeros(B, L, bio_tags(C))
        tags[..., OUTSIDE] = outside
        tags[..., 1::2] = spans.sum(2)  # B-c: spans starting at the word
        # I-c at word t: spans starting at t - d (d >= 1) of more than d words
        longer = spans.flip(2).cumsum(2).flip(2)  # [B, L, W, C]: mass of spans of width index >= w
        inside = phi.new_zeros(B, L, C)
        for d in range(1, min(W, L)):
            inside[:, d:] += longer[:, : L - d, d]
        tags[..., 2::2] = inside
        live = torch.arange(L, device=phi.device)[None, :] < lengths[:, None]
        tags = tags * live[..., None]
        return Marginals(spans, tags, log_z)


@dataclass
class KBest:
    """The k best IOB2 paths of every sentence, best first: ``paths`` ``[B, K, L]`` (-1 past the
    sentence and on invalid beams), ``scores`` ``[B, K]`` S(y) of (S2), ``log_probs`` ``[B, K]``
    (S3; -inf on invalid beams, where a sentence has fewer than K segmentations), ``log_z`` ``[B]``."""

    paths: Tensor
    scores: Tensor
    log_probs: Tensor
    log_z: Tensor

    @property
    def valid(self) -> Tensor:
        return torch.isfinite(self.log_probs)


def kbest(phi: Tensor, lengths: Tensor, k: int, log_z: Tensor | None = None) -> KBest:
    """The ``k`` best flat segmentations as IOB2 paths by k-best Viterbi over segments: at each
    word boundary ``t`` the ``k`` best partial segmentations of words ``0..t-1``, extended by an
    outside word or by a span of any width and type ending at ``t``. Each candidate is a distinct
    segmentation, so the lists hold no duplicates. ``log_z``: (S3)'s, when the caller has it."""
    with torch.autocast(phi.device.type, enabled=False):
        phi, lengths = _prepare(phi, lengths)
        B, L, W, C = phi.shape
        device, neg = phi.device, float("-inf")
        first = phi.new_full((B, k), neg)
        first[:, 0] = 0.0
        scores, pointers = [first], [None]
        widths = torch.arange(W, device=device)
        for t in range(1, L + 1):
            starts, ok = _starts(t, W, device)
            prev = torch.stack([scores[int(i)] for i in starts.tolist()], dim=1)  # [B, W, K]
            span = prev[..., None] + phi[:, starts, widths][:, :, None, :]  # [B, W, K, C]
            span = span.masked_fill(~ok[None, :, None, None], neg)
            candidates = torch.cat([scores[t - 1], span.reshape(B, -1)], dim=1)  # O first, then (w, k', c)
            top, index = candidates.topk(k, dim=1)
            scores.append(top)
            pointers.append(index)
        final = torch.stack(scores, dim=1).gather(1, lengths[:, None, None].expand(B, 1, k)).squeeze(1)  # [B, K]
        paths = _backtrack(pointers, lengths, k, W, C, L)
        if log_z is None:
            log_z = log_partition(phi, lengths)
        log_z = log_z.to(final)
        log_probs = final - log_z[:, None]
        paths = paths.masked_fill(~torch.isfinite(final)[..., None], -1)
        return KBest(paths, final, log_probs, log_z)


def _backtrack(pointers: list, lengths: Tensor, k: int, W: int, C: int, L: int) -> Tensor:
    """IOB2 paths ``[B, K, L]`` from the candidate indices of :func:`kbest`, all beams at once:
    each step undoes one segment (an outside word, or a span of ``w + 1`` words)."""
    B, device = lengths.shape[0], lengths.device
    table = torch.stack([pointers[1] * 0] + pointers[1:], dim=1).reshape(B, L + 1, k)  # [B, L + 1, K]
    beam = torch.arange(B * k, device=device)
    sentence = beam // k
    paths = torch.full((B * k, L), -1, dtype=torch.long, device=device)
    pos = lengths.repeat_interleave(k)
    rank = beam % k
    for _ in range(L):
        active = pos > 0
        if not bool(active.any()):
            break
        index = table[sentence, pos, rank]
        outside = index < k
        span = (index - k).clamp(min=0)
        w, rest = span // (k * C), span % (k * C)
        prev_rank, c = rest // C, rest % C
        width = torch.where(outside, 1, w + 1)
        begin = pos - width
        for j in range(W):
            write = active & (j < width)
            tag = torch.where(outside, OUTSIDE, (1 if j == 0 else 2) + 2 * c)
            at = (begin + j).clamp(0, L - 1)
            paths[beam, at] = torch.where(write, tag, paths[beam, at])
        rank = torch.where(active, torch.where(outside, index, prev_rank), rank)
        pos = torch.where(active, begin, pos)
    return paths.reshape(B, k, L)


def path_scores(phi: Tensor, lengths: Tensor, tags: Tensor) -> Tensor:
    """S(y) of (S2) of given IOB2 paths ``[B, L]`` (ids as above; -inf where a path has an entity
    wider than ``W`` words or an ``I-c`` that continues nothing, which no segmentation gives; NaN
    for a row with no tags, -1, such as an unlabelled sentence's). The paths are read into segments
    on the host (one copy of ``tags``), their potentials summed on ``phi``'s device in one gather."""
    phi, lengths = _prepare(phi, lengths)
    W = phi.shape[2]
    out = phi.new_zeros(phi.shape[0])
    index: list[tuple[int, int, int, int]] = []  # (sentence, start, width index, type) of every entity
    for b, (n, row) in enumerate(zip(lengths.tolist(), tags.tolist())):
        segments = _segments(row[:n], W)
        if isinstance(segments, float):  # no segmentation gives it, or no tags
            out[b] = segments
        else:
            index += [(b, *seg) for seg in segments]
    if index:
        b, t, w, c = torch.tensor(index, device=phi.device).unbind(1)
        out = out.index_add(0, b, phi[b, t, w, c])
    return out


def _segments(row: list[int], W: int) -> list[tuple[int, int, int]] | float:
    """The entity segments ``(start, width index, type)`` of one IOB2 path; instead, its score where
    it has none: -inf where no segmentation gives it (an entity wider than ``W``, an ``I-c``
    continuing nothing), NaN where the row holds no tags (-1)."""
    if min(row) < 0:
        return float("nan")
    segments, t, n = [], 0, len(row)
    while t < n:
        tag = row[t]
        if tag == OUTSIDE:
            t += 1
            continue
        if tag % 2 == 0:  # an I- tag that begins a span
            return float("-inf")
        end = t + 1
        while end < n and row[end] == tag + 1:
            end += 1
        if end - t > W:
            return float("-inf")
        segments.append((t, end - t - 1, (tag - 1) // 2))
        t = end
    return segments
