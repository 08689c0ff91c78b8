"""Linear-chain CRF operations, batched and masked, for teachers and students alike.

Notation (paper 000, §3.1): emissions ``E[b, t, y]`` (``[B, L, T]``), transitions ``A[y, y']``
(score of ``y'`` following ``y``), start and end scores ``s[y]``, ``e[y]``; the mask ``[B, L]`` is
True on the first ``n_b`` positions of sentence ``b`` (left-aligned, every sentence non-empty).
The score of a path is

    S(x, y) = s[y_1] + sum_t E[t, y_t] + sum_{t>1} A[y_{t-1}, y_t] + e[y_n]

and ``p(y | x) = exp(S(x, y) - log Z(x))`` with ``log Z = logsumexp_y S(x, y)`` (eq. 1-2).

Every function is vectorised over the batch (and, for k-best, over the K beams): the only Python
loop is over time. Scores are computed in float32 at least (float64 stays float64) with autocast
disabled, so the functions can be called from inside a bf16/fp16 autocast region. Forbidden
transitions, starts and ends (from a tag scheme, see :meth:`CRF.from_schema`) are ``-inf``: no
decoded path ever uses them, and a sentence with fewer valid paths than K gets its remaining
beams marked invalid (``valid`` False, ``log_prob`` -inf, path filled with ``PAD_TAG``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

PAD_TAG = -1


def _prepare(emissions: Tensor, *params: Tensor) -> tuple[Tensor, ...]:
    dtype = torch.promote_types(emissions.dtype, torch.float32)
    return (emissions.to(dtype),) + tuple(p.to(device=emissions.device, dtype=dtype) for p in params)


def _no_autocast(device: torch.device):
    return torch.autocast(device_type=device.type, enabled=False)


def _all_live(mask: Tensor, known: int | None = None) -> int:
    """The number of steps every sentence of the batch runs (its shortest sentence's length):
    before it no step needs masking. ``known``: that number as the caller has it on the host (the
    build does, from the words). Otherwise counted on a CPU only: on a GPU, counting would wait for
    the device, and masking every step gives the same values (0), at a few more launches a step."""
    if known is not None:
        return known
    return int(mask.sum(1).min()) if mask.device.type == "cpu" else 0


def log_partition(emissions: Tensor, mask: Tensor, transitions: Tensor, start: Tensor, end: Tensor) -> Tensor:
    """log Z(x) for every sentence by the forward algorithm (paper 000, eq. 2). Returns ``[B]``."""
    with _no_autocast(emissions.device):
        emissions, transitions, start, end = _prepare(emissions, transitions, start, end)
        alpha, all_live = start + emissions[:, 0], _all_live(mask)
        for t in range(1, emissions.shape[1]):
            nxt = torch.logsumexp(alpha.unsqueeze(2) + transitions, dim=1) + emissions[:, t]
            alpha = nxt if t < all_live else torch.where(mask[:, t, None], nxt, alpha)
        return torch.logsumexp(alpha + end, dim=1)


def path_score(
    emissions: Tensor, mask: Tensor, tags: Tensor, transitions: Tensor, start: Tensor, end: Tensor
) -> Tensor:
    """S(x, y) of the given tag sequences ``[B, L]`` (positions outside the mask are ignored)."""
    with _no_autocast(emissions.device):
        emissions, transitions, start, end = _prepare(emissions, transitions, start, end)
        tags = tags.clamp(min=0)
        maskf = mask.to(emissions.dtype)
        emit = emissions.gather(2, tags.unsqueeze(2)).squeeze(2)
        score = start[tags[:, 0]] + (emit * maskf).sum(1)
        trans = transitions[tags[:, :-1], tags[:, 1:]]
        score = score + (torch.where(mask[:, 1:], trans, torch.zeros_like(trans))).sum(1)
        last = tags.gather(1, (mask.sum(1, keepdim=True) - 1).clamp(min=0)).squeeze(1)
        return score + end[last]


def nll(
    emissions: Tensor,
    mask: Tensor,
    tags: Tensor,
    transitions: Tensor,
    start: Tensor,
    end: Tensor,
    log_z: Tensor | None = None,
) -> Tensor:
    """Negative log-likelihood ``log Z(x) - S(x, y)`` of gold paths, per sentence ``[B]``
    (``log_z``: log Z already computed for these emissions, e.g. by :func:`marginals`)."""
    if log_z is None:
        log_z = log_partition(emissions, mask, transitions, start, end)
    return log_z - path_score(emissions, mask, tags, transitions, start, end)


def marginals(
    emissions: Tensor,
    mask: Tensor,
    transitions: Tensor,
    start: Tensor,
    end: Tensor,
    with_log_z: bool = False,
    shortest: int | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Posterior tag marginals ``p(y_t = y | x)`` by forward-backward, ``[B, L, T]`` (0 on padding);
    with ``with_log_z`` also log Z ``[B]``, the forward pass's (the same values as
    :func:`log_partition`'s, which then need not run again). ``shortest``: the length of the
    batch's shortest sentence, where the caller knows it on the host (:func:`_all_live`)."""
    with _no_autocast(emissions.device):
        emissions, transitions, start, end = _prepare(emissions, transitions, start, end)
        B, L, T = emissions.shape
        all_live = _all_live(mask, shortest)
        alphas = [start + emissions[:, 0]]
        for t in range(1, L):
            nxt = torch.logsumexp(alphas[-1].unsqueeze(2) + transitions, dim=1) + emissions[:, t]
            alphas.append(nxt if t < all_live else torch.where(mask[:, t, None], nxt, alphas[-1]))
        log_z = torch.logsumexp(alphas[-1] + end, dim=1)
        betas = [end.expand(B, T)]
        for t in range(L - 2, -1, -1):
            nxt = torch.logsumexp(transitions + (emissions[:, t + 1] + betas[0]).unsqueeze(1), dim=2)
            betas.insert(0, nxt if t + 1 < all_live else torch.where(mask[:, t + 1, None], nxt, end.expand(B, T)))
        alpha, beta = torch.stack(alphas, 1), torch.stack(betas, 1)
        probs = torch.exp(alpha + beta - log_z[:, None, None])
        probs = probs * mask.unsqueeze(2).to(probs.dtype)
        return (probs, log_z) if with_log_z else probs


@dataclass
class KBest:
    """The K best paths of each sentence: ``paths [B, K, L]`` (``PAD_TAG`` outside the sentence
    and on invalid beams), ``scores [B, K]`` = S(x, y), ``log_probs [B, K]`` = S - log Z (global),
    ``log_z [B]``, ``valid [B, K]``. The residual mass is ``1 - exp(log_probs).sum(1)``."""

    paths: Tensor
    scores: Tensor
    log_probs: Tensor | None
    log_z: Tensor | None
    valid: Tensor


def kbest(
    emissions: Tensor,
    mask: Tensor,
    transitions: Tensor,
    start: Tensor,
    end: Tensor,
    k: int,
    with_log_z: bool = True,
    log_z: Tensor | None = None,
    shortest: int | None = None,
) -> KBest:
    """The ``k`` highest-scoring paths of every sentence by k-best Viterbi, best first.

    Each state ``(t, y)`` keeps its ``k`` best partial paths, sorted; the candidates for
    ``(t, y')`` are their extensions from ``t - 1``, of which the top ``k`` survive with a pointer
    to the (rank, tag) they extend. When ``k < T`` only the ``k`` previous tags whose best partial
    path scores highest into ``y'`` can contribute (any other tag's candidates are all beaten by
    those ``k`` heads), so ``k * k`` candidates are ranked instead of ``k * T``. All sentences and
    beams advance together; the only loop is over time (paper 000, Appendix C). With
    ``with_log_z=False`` log Z is not computed and ``log_probs`` / ``log_z`` are None (decoding only);
    ``log_z``: log Z already computed for these emissions (:func:`marginals`), used as it is;
    ``shortest``: the length of the batch's shortest sentence, where the caller knows it on the host.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    with _no_autocast(emissions.device):
        emissions, transitions, start, end = _prepare(emissions, transitions, start, end)
        B, L, T = emissions.shape
        dev = emissions.device
        neg_inf = torch.full((), float("-inf"), dtype=emissions.dtype, device=dev)  # a fill: no host copy
        delta = torch.full((B, k, T), float("-inf"), dtype=emissions.dtype, device=dev)
        delta[:, 0] = start + emissions[:, 0]
        trans_t = transitions.t()  # [T(next), T(prev)]
        # back-pointers are flat indices rank * T + tag into the previous step's [k, T] states;
        # where a sentence has ended they point to themselves
        stay = (torch.arange(k, device=dev).view(k, 1) * T + torch.arange(T, device=dev)).expand(B, k, T)
        trans_flat = trans_t.repeat(1, k).unsqueeze(0)  # [1, T(next), k * T(prev)]: A[i, j] at r * T + i
        all_live = _all_live(mask, shortest)
        back = []
        for t in range(1, L):
            if k == 1:
                top, flat = (delta.reshape(B, 1, T) + trans_flat).max(dim=2, keepdim=True)
            elif k >= T:
                top, flat = (delta.reshape(B, 1, k * T) + trans_flat).topk(k, dim=2)  # [B, T(next), k]
            else:
                heads = delta[:, 0].unsqueeze(1) + trans_t  # [B, T(next), T(prev)]
                prev = heads.topk(k, dim=2).indices  # [B, T(next), k] the tags worth extending
                by_tag = delta.transpose(1, 2)  # [B, T(prev), k ranks]
                cand = by_tag.gather(1, prev.reshape(B, T * k, 1).expand(B, T * k, k)).view(B, T, k, k)
                cand = cand + trans_t.expand(B, T, T).gather(2, prev).unsqueeze(3)  # [B, T(next), m, r]
                top, pos = cand.view(B, T, k * k).topk(k, dim=2)
                flat = (pos % k) * T + prev.gather(2, pos // k)
            top, flat = top.transpose(1, 2), flat.transpose(1, 2)  # [B, k, T(next)]
            top = top + emissions[:, t].unsqueeze(1)
            if t < all_live:
                delta = top
            else:
                live = mask[:, t].view(B, 1, 1)
                delta, flat = torch.where(live, top, delta), torch.where(live, flat, stay)
            back.append(flat)  # [B, k, T(next)], copied into one tensor after the loop
        scores, cur = (delta + end.view(1, 1, T)).reshape(B, k * T).topk(k, dim=1)  # [B, k]
        # the walk back: one gather a step over every step's pointers stacked once ([L - 1, B, k * T]),
        # the tags (state % T) of all steps taken at the end: few operations a step, which a GPU
        # launches one by one
        pointers = torch.stack(back).view(L - 1, B, k * T) if back else None
        states = [cur]
        for t in range(L - 1, 0, -1):
            states.append(pointers[t - 1].gather(1, states[-1]))
        paths = torch.stack(states[::-1], dim=2) % T
        valid = torch.isfinite(scores)
        paths = paths.masked_fill(~mask.unsqueeze(1) | ~valid.unsqueeze(2), PAD_TAG)
        if not with_log_z:
            return KBest(paths, scores, None, None, valid)
        if log_z is None:
            log_z = log_partition(emissions, mask, transitions, start, end)
        log_probs = torch.where(valid, scores - log_z.unsqueeze(1), neg_inf)
        return KBest(paths, scores, log_probs, log_z, valid)


def viterbi(emissions: Tensor, mask: Tensor, transitions: Tensor, start: Tensor, end: Tensor) -> tuple[Tensor, Tensor]:
    """The best path ``[B, L]`` (``PAD_TAG`` on padding) and its score ``[B]``."""
    best = kbest(emissions, mask, transitions, start, end, 1, with_log_z=False)
    return best.paths[:, 0], best.scores[:, 0]


class CRF(nn.Module):
    """CRF parameters (transitions, start, end) with optional scheme constraints.

    Constraints are boolean masks of allowed starts, transitions and ends; forbidden entries are
    -inf in the effective scores, whatever the learned parameters are.
    """

    def __init__(self, num_tags: int, allowed: tuple | None = None):
        super().__init__()
        self.num_tags = num_tags
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))
        self.start = nn.Parameter(torch.zeros(num_tags))
        self.end = nn.Parameter(torch.zeros(num_tags))
        if allowed is None:
            allowed = (
                torch.ones(num_tags, dtype=torch.bool),
                torch.ones(num_tags, num_tags, dtype=torch.bool),
                torch.ones(num_tags, dtype=torch.bool),
            )
        start_ok, trans_ok, end_ok = (torch.as_tensor(a, dtype=torch.bool) for a in allowed)
        self.register_buffer("start_allowed", start_ok, persistent=False)
        self.register_buffer("transitions_allowed", trans_ok, persistent=False)
        self.register_buffer("end_allowed", end_ok, persistent=False)

    @classmethod
    def from_schema(cls, schema) -> "CRF":
        """A CRF over ``schema.tags`` that can only produce sequences valid in its scheme."""
        return cls(schema.num_tags, schema.allowed())

    def scores(self) -> tuple[Tensor, Tensor, Tensor]:
        """Effective (transitions, start, end), -inf where the scheme forbids."""
        neg = float("-inf")
        return (
            self.transitions.masked_fill(~self.transitions_allowed, neg),
            self.start.masked_fill(~self.start_allowed, neg),
            self.end.masked_fill(~self.end_allowed, neg),
        )

    def log_partition(self, emissions: Tensor, mask: Tensor) -> Tensor:
        return log_partition(emissions, mask, *self.scores())

    def nll(self, emissions: Tensor, mask: Tensor, tags: Tensor, log_z: Tensor | None = None) -> Tensor:
        return nll(emissions, mask, tags, *self.scores(), log_z=log_z)

    def marginals(self, emissions: Tensor, mask: Tensor, with_log_z: bool = False, shortest: int | None = None):
        return marginals(emissions, mask, *self.scores(), with_log_z=with_log_z, shortest=shortest)

    def kbest(
        self, emissions: Tensor, mask: Tensor, k: int, log_z: Tensor | None = None, shortest: int | None = None
    ) -> KBest:
        return kbest(emissions, mask, *self.scores(), k, log_z=log_z, shortest=shortest)

    def decode(self, emissions: Tensor, mask: Tensor) -> Tensor:
        return viterbi(emissions, mask, *self.scores())[0]
