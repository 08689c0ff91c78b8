"""Multi-Grained KD's losses (paper 000), one function per equation.

Every loss returns one value per sentence (``[B]``); callers average. Teacher quantities come from
the cache: k-best log-probabilities are global (``log p_j^t = S_t(y_j) - log Z_t``, -inf on
padded beams), emissions are raw, marginals are probabilities. Student quantities come from the
student's CRF.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...crf import log_partition, nll, path_score


def _log1mexp(x: Tensor) -> Tensor:
    """log(1 - exp(x)) for x <= 0, stable near 0 and at -inf."""
    x = x.clamp(max=-1e-7)
    return torch.where(x > -0.693, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def hard_loss(
    emissions: Tensor,
    mask: Tensor,
    tags: Tensor,
    transitions: Tensor,
    start: Tensor,
    end: Tensor,
    log_z: Tensor | None = None,
) -> Tensor:
    """L_hard = -log P^s(y_hard | x) (eq. 7): gold tags on labelled rows, the teacher's top-1 path
    on unlabelled ones (§3.2): the student CRF's NLL of those tags (``crf.nll``). ``log_z``: the
    student's log Z of these rows when computed already (several teachers' hard labels of one batch
    share it)."""
    return nll(emissions, mask, tags, transitions, start, end, log_z)


def student_path_log_probs(
    emissions: Tensor,
    mask: Tensor,
    paths: Tensor,
    transitions: Tensor,
    start: Tensor,
    end: Tensor,
    log_z: Tensor | None = None,
) -> Tensor:
    """log p_j^s = S_s(y_j) - log Z_s of the teacher's k-best paths ``[B, K, L]`` under the student
    CRF (eq. 4-5). Beams that are padding (a path of -1 at position 0) get -inf."""
    B, K, L = paths.shape
    if log_z is None:
        log_z = log_partition(emissions, mask, transitions, start, end)
    flat = path_score(
        emissions.repeat_interleave(K, 0),
        mask.repeat_interleave(K, 0),
        paths.reshape(B * K, L),
        transitions,
        start,
        end,
    ).view(B, K)
    valid = paths[:, :, 0] >= 0
    return torch.where(valid, flat - log_z.unsqueeze(1), torch.full_like(flat, float("-inf")))


def _without_empty_rows(teacher_log_probs: Tensor, student_log_probs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Rows that hold at least one path ``[B]``, and both inputs with the rows that hold none set to 0:
    a finite stand-in whose loss is masked out, so that no NaN reaches the gradients (a logsumexp
    over -inf only has none)."""
    has = torch.isfinite(teacher_log_probs).any(1)
    keep = has.unsqueeze(1)
    return has, torch.where(keep, teacher_log_probs, 0.0), torch.where(keep, student_log_probs, 0.0)


def seq_ce_loss(teacher_log_probs: Tensor, student_log_probs: Tensor) -> Tensor:
    """k-best cross entropy with the residual term (eq. 4):

        L_Seq-ce = - sum_j p_j^t log p_j^s - (1 - p_sum^t) log(1 - p_sum^s)

    ``[B, K]`` log-probabilities, -inf on padded beams. A row without paths scores 0."""
    has, teacher_log_probs, student_log_probs = _without_empty_rows(teacher_log_probs, student_log_probs)
    p_t = teacher_log_probs.exp()
    valid = torch.isfinite(teacher_log_probs)
    ce = -(p_t * torch.where(valid, student_log_probs, torch.zeros_like(student_log_probs))).sum(1)
    p_sum_t = p_t.sum(1).clamp(max=1.0)
    log_sum_s = torch.logsumexp(student_log_probs, dim=1)
    return torch.where(has, ce - (1 - p_sum_t) * _log1mexp(log_sum_s), 0.0)


def seq_ce_renormalised_loss(teacher_log_probs: Tensor, student_log_probs: Tensor) -> Tensor:
    """Seq-CE without the residual term: both distributions renormalised over the K paths,

        L = - sum_j (p_j^t / p_sum^t) log(p_j^s / p_sum^s)

    Not in paper 000 (issue 22's residual-mass candidate): it keeps only how the teacher ranks its
    K paths against each other, and leaves the mass outside them to the fuzzy loss (eq. 6). A row
    without paths scores 0."""
    has, teacher_log_probs, student_log_probs = _without_empty_rows(teacher_log_probs, student_log_probs)
    t_norm = teacher_log_probs - torch.logsumexp(teacher_log_probs, dim=1, keepdim=True)
    s_norm = student_log_probs - torch.logsumexp(student_log_probs, dim=1, keepdim=True)
    valid = torch.isfinite(teacher_log_probs)  # the student's paths are the teacher's: the same beams are padding
    ce = -torch.where(valid, t_norm.exp() * s_norm, torch.zeros_like(s_norm)).sum(1)
    return torch.where(has, ce, 0.0)


def tempered_kbest(teacher_log_probs: Tensor, temperature: float) -> Tensor:
    """The teacher's k-best distribution at temperature T with its top-K mass kept:

        log p~_j^t = log p_sum^t + log softmax_j(log p_j^t / T)

    T = 1 gives p^t back; T > 1 spreads the K paths' mass more evenly over them, T < 1 moves it to
    the best path. p_sum^t, and so the residual term of eq. 4 and the fuzzy loss (eq. 6), do not
    change. Not in paper 000 (issue 22's temperature candidate): the cache holds the paths'
    probabilities at T = 1 and not the teacher's transition scores, so log Z at another T, and a
    temperature over all paths, cannot be computed from it; this one acts on the K."""
    if temperature == 1.0:
        return teacher_log_probs
    log_sum = torch.logsumexp(teacher_log_probs, dim=1, keepdim=True)
    tempered = log_sum + torch.log_softmax(teacher_log_probs / temperature, dim=1)
    return torch.where(torch.isfinite(log_sum), tempered, teacher_log_probs)


def seq_fuzzy_loss(teacher_log_probs: Tensor, student_log_probs: Tensor) -> Tensor:
    """Fuzzy (coarse-grained) loss, the binary cross entropy of the top-K mass (eq. 6):

    L_Seq-fuzzy = - p_sum^t log p_sum^s - (1 - p_sum^t) log(1 - p_sum^s)

    A row without paths scores 0."""
    has, teacher_log_probs, student_log_probs = _without_empty_rows(teacher_log_probs, student_log_probs)
    p_sum_t = teacher_log_probs.exp().sum(1).clamp(max=1.0)
    log_sum_s = torch.logsumexp(student_log_probs, dim=1)
    return torch.where(has, -p_sum_t * log_sum_s - (1 - p_sum_t) * _log1mexp(log_sum_s), 0.0)


def token_kl_loss(student_logits: Tensor, teacher_probs: Tensor, mask: Tensor, temperature: float = 1.0) -> Tensor:
    """Token-level distillation (eq. 10): sum over words of KL(P^t(y_j) || P^s(y_j)), where P^s is
    the softmax of the student's emissions at ``temperature``. With P^t the softmax of the
    teacher's emissions this is L_Token-em; with the teacher's CRF marginals, L_Token-pos.
    Scaled by temperature^2 so that gradients keep their size (Hinton et al.)."""
    log_s = torch.log_softmax(student_logits / temperature, dim=-1)
    p_t = teacher_probs.clamp(min=0)
    kl = (p_t * (torch.log(p_t.clamp(min=1e-12)) - log_s)).sum(-1)
    return (kl * mask.to(kl.dtype)).sum(1) * temperature**2


def teacher_softmax(teacher_emissions: Tensor, temperature: float = 1.0) -> Tensor:
    """P^t(y_j = k) from raw teacher emissions (the cache stores them at temperature 1)."""
    return torch.softmax(teacher_emissions.float() / temperature, dim=-1)


class UncertaintyWeighting(nn.Module):
    """Learned loss weights (eq. 9, Cipolla et al. 2018):

        L^u = sum_i lambda_i L_i - 1/2 sum_i log lambda_i,   lambda_i = exp(s_i) > 0

    ``s_i`` start at 0 (lambda_i = 1)."""

    def __init__(self, n: int):
        super().__init__()
        self.log_weights = nn.Parameter(torch.zeros(n))

    def forward(self, losses: Tensor) -> Tensor:
        return (self.log_weights.exp() * losses).sum() - 0.5 * self.log_weights.sum()

    @property
    def weights(self) -> Tensor:
        return self.log_weights.detach().exp()
