"""MT-BERT's multi-teacher losses (paper 002), brought to sequence labelling (issue 8).

The paper classifies whole texts; here every quantity is per token (per word of the cache) and is
aggregated per sentence, so that each loss returns one value per sentence (``[B]``) like the
other losses of this package. Teacher quantities come from the cache, one teacher layer each: logits
(CRF emissions or softmax logits), hidden layers, and for labelled rows the teacher's
cross-entropy against the gold tags.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def teacher_weight(gold_ce: Tensor | None, labelled: Tensor | None = None) -> Tensor | None:
    """``1 / (1 + CE(y, y_i))`` of eq. 2 for one teacher, per sentence. ``gold_ce`` is the
    teacher's cross-entropy against the gold tags **per word** (the build's sequence NLL divided
    by the sentence's words, so that a long sentence does not weigh less for being long). Rows
    without gold tags (``labelled`` False) get weight 1: the paper's weighting needs labels, and
    an unlabelled row is taught by every teacher alike."""
    if gold_ce is None:
        return None
    w = 1.0 / (1.0 + gold_ce.clamp(min=0.0))
    return w if labelled is None else torch.where(labelled, w, torch.ones_like(w))


def teacher_shares(gold_ce: Tensor, labelled: Tensor, how: str = "mt") -> Tensor:
    """Each teacher's share of a sentence's teacher losses, ``[N, B]``, summing to 1 over the N
    teachers (issue 81: several teachers for one MGKD student).

    ``how="mt"``: eq. 2's weights w_i = 1 / (1 + CE(y, y_i)) (:func:`teacher_weight`; ``gold_ce``
    ``[N, B]`` holds each teacher's gold cross-entropy per word, and an unlabelled row weighs every
    teacher 1), normalised, a_i = w_i / sum_j w_j. Normalised, unlike eq. 2's plain sum, so that N
    teachers teach with the weight of one beside the hard loss and a single teacher's share is 1;
    the teachers' ratio is eq. 2's. A row where every w_i is 0 (every gold CE infinite) is shared
    evenly. ``how="uniform"``: 1/N each."""
    n = gold_ce.shape[0]
    even = torch.full_like(gold_ce, 1.0 / n)
    if how == "uniform":
        return even
    if how != "mt":
        raise ValueError(f"teacher shares {how!r}: choose mt (eq. 2) or uniform")
    w = torch.stack([teacher_weight(ce, labelled) for ce in gold_ce])
    total = w.sum(0, keepdim=True)
    return torch.where(total > 0, w / total.clamp(min=torch.finfo(w.dtype).tiny), even)


def confidence_shares(best_log_probs: Tensor) -> Tensor:
    """Each teacher's share of a sentence by its confidence in its own best path, ``[N, B]`` (issue
    81): a_i = P_i(y*_i | x) / sum_j P_j(y*_j | x), where y*_i is teacher i's top path and
    ``best_log_probs`` ``[N, B]`` holds log P_i(y*_i | x) (the cache's ``kbest_log_probs[0]``): the
    softmax of the log-probabilities over the teachers. It reads no gold, so it shares unlabelled rows
    too, where eq. 2 can only share evenly; a row where no teacher has a finite probability is shared
    evenly."""
    even = torch.full_like(best_log_probs, 1.0 / best_log_probs.shape[0])
    finite = torch.isfinite(best_log_probs).any(0, keepdim=True)
    return torch.where(finite, torch.softmax(best_log_probs, dim=0), even)


def mt_distillation_loss(
    student_logits: Tensor,
    teacher_logits: list[Tensor],
    weights: list[Tensor | None],
    mask: Tensor,
    temperature: float = 1.0,
) -> Tensor:
    """L_MT-Dis = Σ_i CE(y_i/t, y_s/t) / (1 + CE(y, y_i)) (eq. 2), per sentence ``[B]``.

    CE(y_i/t, y_s/t) = -Σ_c softmax(z_i/t)_c · log softmax(z_s/t)_c for each word, averaged over
    the sentence's words; ``weights[i]`` is :func:`teacher_weight` of teacher i (None: 1, the
    unweighted ensemble of the paper's ablation). ``student_logits`` ``[B, L, C]``, each
    ``teacher_logits[i]`` ``[B, L, C]``, ``mask`` ``[B, L]``."""
    log_q = F.log_softmax(student_logits / temperature, dim=-1)
    m = mask.to(log_q.dtype)
    words = m.sum(1).clamp(min=1.0)
    total = torch.zeros(student_logits.shape[0], dtype=log_q.dtype, device=log_q.device)
    for z, w in zip(teacher_logits, weights):
        p = F.softmax(z.to(log_q.dtype) / temperature, dim=-1)
        ce = -(p * log_q).sum(-1)  # [B, L]
        per_sentence = (ce * m).sum(1) / words
        total = total + (per_sentence if w is None else per_sentence * w)
    return total


def ensemble_distillation_loss(
    student_logits: Tensor, teacher_logits: list[Tensor], mask: Tensor, temperature: float = 1.0
) -> Tensor:
    """The uniform-ensemble baseline: CE of the student against the mean of the teachers' soft
    labels, per sentence ``[B]``."""
    log_q = F.log_softmax(student_logits / temperature, dim=-1)
    p = torch.stack([F.softmax(z.to(log_q.dtype) / temperature, dim=-1) for z in teacher_logits]).mean(0)
    m = mask.to(log_q.dtype)
    return (-(p * log_q).sum(-1) * m).sum(1) / m.sum(1).clamp(min=1.0)


class MTHiddenLoss(nn.Module):
    """L_MT-Hid = Σ_i Σ_j MSE(H^s_j, W_ij H^i_{Tj} / s_ij) (eq. 1), with a learnable ``W_ij`` (no bias)
    from teacher i's hidden size to the student's for every teacher i and student layer j. The
    caller picks the teacher layer T·j that student layer j matches, and ``scales`` s_ij (default 1:
    eq. 1 as written) that divide each teacher layer's states, so that teachers whose states differ
    in size by orders of magnitude weigh alike (``recipes/mt.py``). MSE is the mean over the
    sentence's words and the student's hidden dimensions, per sentence ``[B]``."""

    def __init__(
        self, student_dim: int, teacher_dims: list[int], student_layers: int, scales: list[list[float]] | None = None
    ):
        super().__init__()
        self.maps = nn.ModuleList(
            nn.ModuleList(nn.Linear(d, student_dim, bias=False) for _ in range(student_layers)) for d in teacher_dims
        )
        scales = scales if scales is not None else [[1.0] * student_layers for _ in teacher_dims]
        if len(scales) != len(teacher_dims) or any(len(row) != student_layers for row in scales):
            raise ValueError(f"scales: one per teacher and student layer ({len(teacher_dims)} x {student_layers})")
        # not in the state dict: derived from the cache at every start, so checkpoints stay as they were
        self.register_buffer("scales", torch.tensor(scales, dtype=torch.float32), persistent=False)

    def forward(self, student_hidden: list[Tensor], teacher_hidden: list[list[Tensor]], mask: Tensor) -> Tensor:
        m = mask.to(student_hidden[0].dtype)
        denom = m.sum(1).clamp(min=1.0) * student_hidden[0].shape[-1]
        total = torch.zeros(mask.shape[0], dtype=m.dtype, device=m.device)
        for maps, layers, scales in zip(self.maps, teacher_hidden, self.scales):
            for W, h_s, h_t, s in zip(maps, student_hidden, layers, scales):
                sq = (h_s - W((h_t / s).to(h_s.dtype))).pow(2).sum(-1)
                total = total + (sq * m).sum(1) / denom
        return total
