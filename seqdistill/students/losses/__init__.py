"""Every distillation loss, one module per paper, one function per equation (its number in the
docstring), each checked against a hand computation in the tests:

* ``mgkd.py`` — Multi-Grained KD (paper 000): hard, k-best sequence cross entropy, fuzzy, token
  KL, learned loss weights;
* ``xtremedistil.py`` — XtremeDistil (paper 001): hard-label CE, logit and representation losses;
* ``mt.py`` — MT-BERT (paper 002): multi-teacher distillation, hidden-state loss, teacher weights;
* ``rnn.py`` — the BILOU-per-type RNN students (paper 003): Dice and cross entropy per type;
* ``sentscore.py`` — SenTScore KD (paper 004);
* ``token_kd.py`` — token-level KD (Hinton et al., 2015), the baseline.
"""

from .mgkd import (
    UncertaintyWeighting,
    hard_loss,
    seq_ce_loss,
    seq_ce_renormalised_loss,
    seq_fuzzy_loss,
    student_path_log_probs,
    teacher_softmax,
    tempered_kbest,
    token_kl_loss,
)
from .mt import (
    MTHiddenLoss,
    confidence_shares,
    ensemble_distillation_loss,
    mt_distillation_loss,
    teacher_shares,
    teacher_weight,
)
from .rnn import bilou_loss, bilou_soft_loss, dice_loss
from .sentscore import sentscore_kd_loss
from .token_kd import teacher_probs, token_kd_loss
from .xtremedistil import cross_entropy_loss, logit_loss, representation_loss

__all__ = [
    "MTHiddenLoss",
    "UncertaintyWeighting",
    "bilou_loss",
    "bilou_soft_loss",
    "confidence_shares",
    "cross_entropy_loss",
    "dice_loss",
    "ensemble_distillation_loss",
    "hard_loss",
    "logit_loss",
    "mt_distillation_loss",
    "representation_loss",
    "sentscore_kd_loss",
    "seq_ce_loss",
    "seq_ce_renormalised_loss",
    "seq_fuzzy_loss",
    "student_path_log_probs",
    "teacher_probs",
    "teacher_shares",
    "teacher_softmax",
    "teacher_weight",
    "tempered_kbest",
    "token_kd_loss",
    "token_kl_loss",
]
