"""Multi-teacher co-fine-tuning (paper 002, §2.1), brought to sequence labelling (issue 8).

N encoders are fine-tuned together under one shared prediction head so that their outputs live in
one space: teacher i is encoder_i → dropout → P_i → W (→ CRF), where ``W`` (a linear layer to the
tags) and the CRF are shared by all teachers, and ``P_i`` is a per-teacher linear projection from
encoder i's hidden size to the first encoder's (the identity where they are equal). The loss is
Σ_i CE(y, y_i): the sum of the teachers' own losses (CRF NLL or token cross-entropy) on the same
batch. The paper's shared pooling layer summarises a text; per-word tagging needs none.

Each teacher is then saved as an ordinary teacher directory, its head folded into one linear layer
(``W P_i``, bias ``W b_i + b``: exact, the composition of two linear maps) plus the shared CRF, so
that ``distill-cache build`` runs them one after another into one cache with nothing to know about
co-fine-tuning.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import torch
from torch import nn

from ..cache_schema import LabelSchema
from .base import TeacherError
from .encoder import Teacher
from .finetune import FinetuneConfig, fit, layerwise_groups
from .loading import build_teacher


class SharedHead(nn.Module):
    """``P_i`` then the shared ``W``: what teacher i's ``classifier`` is during co-fine-tuning."""

    def __init__(self, projection: nn.Module, shared: nn.Linear):
        super().__init__()
        self.projection, self.shared = projection, shared

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shared(self.projection(x))

    def folded(self) -> nn.Linear:
        """One linear layer equal to ``shared ∘ projection``."""
        W, b = self.shared.weight.detach(), self.shared.bias.detach()
        if isinstance(self.projection, nn.Identity):
            weight, bias = W.clone(), b.clone()
        else:
            weight = W @ self.projection.weight.detach()
            bias = W @ self.projection.bias.detach() + b
        out = nn.Linear(weight.shape[1], weight.shape[0])
        with torch.no_grad():
            out.weight.copy_(weight)
            out.bias.copy_(bias)
        return out.to(W.device)


def co_teachers(
    encoders: list[str], schema: LabelSchema, cfg: FinetuneConfig, *, trust_remote_code: bool = False
) -> list[Teacher]:
    """N teachers whose ``classifier`` (and CRF) are shared as described above."""
    if len(encoders) < 2:
        raise TeacherError("co-fine-tuning needs at least two encoders (--encoder A --encoder B)")
    if cfg.head not in ("crf", "softmax"):
        raise TeacherError(f"co-fine-tuning shares a crf or softmax head, not {cfg.head!r}")
    teachers = [
        build_teacher(
            e,
            schema,
            cfg.head,
            pooling=cfg.pooling,
            dropout=cfg.dropout,
            max_length=cfg.max_length,
            trust_remote_code=trust_remote_code,
            seed=cfg.seed + i,
        )
        for i, e in enumerate(encoders)
    ]
    torch.manual_seed(cfg.seed)
    d = teachers[0].encoder.config.hidden_size
    shared = nn.Linear(d, schema.num_tags)
    for t in teachers:
        h = t.encoder.config.hidden_size
        t.classifier = SharedHead(nn.Identity() if h == d else nn.Linear(h, d), shared)
    if cfg.head == "crf":
        for t in teachers[1:]:
            t.crf = teachers[0].crf
    return teachers


def co_groups(teachers: list[Teacher], cfg: FinetuneConfig) -> list[dict]:
    """Each encoder's layer-wise groups (paper 000's decay, as for one teacher) and one group for
    the head: every projection, the shared linear layer and the shared CRF, each once."""
    groups, head, seen = [], [], set()
    for t in teachers:
        groups += layerwise_groups(t, cfg)[:-1]
        for name, p in t.named_parameters():
            if not name.startswith("encoder.") and id(p) not in seen:
                seen.add(id(p))
                head.append(p)
    return groups + [{"params": head, "lr": cfg.head_lr, "weight_decay": 0.0}]


def standalone(teacher: Teacher) -> Teacher:
    """A plain teacher equal to ``teacher`` in eval mode: its shared head folded into one linear
    layer (the CRF, shared, is copied)."""
    kind = type(teacher)
    out = kind(
        teacher.encoder,
        teacher.tokenizer,
        teacher.schema,
        pooling=teacher.pooling,
        dropout=teacher.dropout_p,
        max_length=teacher.max_length,
    )
    out.classifier = teacher.classifier.folded()
    if getattr(teacher, "crf", None) is not None:  # the shared CRF of a crf kind
        out.crf.load_state_dict(teacher.crf.state_dict())
    return out.to(teacher.device).eval()


def teacher_names(encoders: list[str]) -> list[str]:
    """Directory names of the co-fine-tuned teachers: each encoder's last path component, made safe
    and unique (``-2``, ``-3`` ... for repeats)."""
    names = []
    for e in encoders:
        base = re.sub(r"[^A-Za-z0-9._-]", "-", Path(e.rstrip("/")).name or "teacher").strip("-.") or "teacher"
        name, n = base, 2
        while name in names:
            name, n = f"{base}-{n}", n + 1
        names.append(name)
    return names


def cofinetune(
    encoders: list[str],
    train,
    dev,
    schema: LabelSchema,
    out_dir,
    cfg: FinetuneConfig | None = None,
    *,
    trust_remote_code: bool = False,
    device: str | None = None,
    log=print,
) -> dict:
    """Co-fine-tune ``encoders`` and save teacher i to ``out_dir/<name_i>`` (:func:`teacher_names`)
    at the epoch with the best mean dev F1. Returns the summary (also ``out_dir/training.json``)."""
    cfg = cfg or FinetuneConfig()
    random.seed(cfg.seed)
    dev_name = device or ("cuda" if torch.cuda.is_available() else "cpu")
    teachers = [t.to(dev_name) for t in co_teachers(encoders, schema, cfg, trust_remote_code=trust_remote_code)]
    out_dir = Path(out_dir)
    names = teacher_names(encoders)

    def loss(words, tags):  # Σ_i CE(y, y_i) (§2.1)
        return sum(t.loss(words, tags) for t in teachers)

    def save(d: Path):
        for t, name in zip(teachers, names):
            standalone(t).save(d / name)

    summary = fit(
        loss,
        teachers,
        co_groups(teachers, cfg),
        train,
        dev,
        schema,
        cfg,
        save,
        log,
        out_dir=out_dir,
        run={"encoders": [str(e) for e in encoders]},
        device=torch.device(dev_name),
    )
    summary.update(encoders=[str(e) for e in encoders], teachers=[str(out_dir / n) for n in names])
    (out_dir / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary
