"""Span-level evaluation (seqeval, CoNLL micro average), shared by teachers and students.

Decision: IOB1/IOB2 sequences are scored with seqeval's default mode, which is conlleval's
behaviour (an ill-formed ``I-X`` opens an entity); BIOES and BILOU with seqeval's strict mode and
the matching scheme; BMES and BMEWO are respelled as BIOES (``M`` -> ``I``, ``W`` -> ``S``, tag by
tag) and scored as BIOES; sBIO is turned into IOB2 first (a bare type opens an entity, ``I``
continues the open one, and an ``I`` with none open is read as ``O``).
"""

from __future__ import annotations

from seqeval.metrics import classification_report, f1_score, precision_score, recall_score
from seqeval.scheme import BILOU, IOBES

from .cache_schema.labels import format_tag, parse_tag


def _sbio_to_iob2(tags: list[str]) -> list[str]:
    out, current = [], None
    for t in tags:
        if t == "O":
            out.append("O")
            current = None
        elif t == "I":
            out.append(f"I-{current}" if current else "O")
        else:
            out.append(f"B-{t}")
            current = t
    return out


def _as_bioes(tags: list[str], scheme: str) -> list[str]:
    return [format_tag(parse_tag(t, scheme), "BIOES") for t in tags]


def span_scores(gold: list[list[str]], pred: list[list[str]], scheme: str) -> dict:
    """Micro precision, recall, F1 over entity spans, per-type scores and macro F1."""
    if len(gold) != len(pred) or any(len(g) != len(p) for g, p in zip(gold, pred)):
        raise ValueError("gold and predicted sequences must have the same lengths")
    kwargs: dict = {}
    if scheme == "sBIO":
        gold, pred = [_sbio_to_iob2(g) for g in gold], [_sbio_to_iob2(p) for p in pred]
    elif scheme in ("BMES", "BMEWO"):  # BIOES under other letters: the same spans, tag by tag
        gold, pred = [_as_bioes(g, scheme) for g in gold], [_as_bioes(p, scheme) for p in pred]
        scheme = "BIOES"
    if scheme in ("BIOES", "BILOU"):
        kwargs = {"mode": "strict", "scheme": IOBES if scheme == "BIOES" else BILOU}
    report = classification_report(gold, pred, output_dict=True, zero_division=0, **kwargs)
    per_type = {
        k: {"precision": v["precision"], "recall": v["recall"], "f1": v["f1-score"], "support": int(v["support"])}
        for k, v in report.items()
        if not k.endswith(" avg")
    }
    return {
        "precision": precision_score(gold, pred, zero_division=0, **kwargs),
        "recall": recall_score(gold, pred, zero_division=0, **kwargs),
        "f1": f1_score(gold, pred, zero_division=0, **kwargs),
        "macro_f1": sum(v["f1"] for v in per_type.values()) / max(len(per_type), 1),
        "per_type": per_type,
        "exact_match": sum(g == p for g, p in zip(gold, pred)) / max(len(gold), 1),
    }


def span_set_scores(gold: list[list[tuple]], pred: list[list[tuple]], types: list[str] | None = None) -> dict:
    """Exact-match scores over sets of ``(start, end, type)`` spans, nested ones included (paper
    003 scores each entity type's layer on its own): micro P/R/F1 over all spans, per-type P/R/F1
    with the gold support, macro F1 over ``types`` (default, used everywhere in seqdistill: the
    types seen in gold or predictions, as seqeval's report does) and the share of sentences
    predicted exactly. On flat, valid tag sequences this equals ``span_scores`` (strict spans)."""
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold sentences but {len(pred)} predicted")
    gold_sets = [set(map(tuple, g)) for g in gold]
    pred_sets = [set(map(tuple, p)) for p in pred]
    names = sorted(types if types is not None else {s[2] for ss in gold_sets + pred_sets for s in ss})

    def prf(tp: int, n_pred: int, n_gold: int) -> tuple[float, float, float]:
        p = tp / n_pred if n_pred else 0.0
        r = tp / n_gold if n_gold else 0.0
        return p, r, 2 * p * r / (p + r) if p + r else 0.0

    per_type = {}
    for t in names:
        tp = sum(len({s for s in g if s[2] == t} & p) for g, p in zip(gold_sets, pred_sets))
        n_pred = sum(1 for p in pred_sets for s in p if s[2] == t)
        n_gold = sum(1 for g in gold_sets for s in g if s[2] == t)
        p, r, f = prf(tp, n_pred, n_gold)
        per_type[t] = {"precision": p, "recall": r, "f1": f, "support": n_gold}
    p, r, f = prf(
        sum(len(g & q) for g, q in zip(gold_sets, pred_sets)), sum(map(len, pred_sets)), sum(map(len, gold_sets))
    )
    return {
        "precision": p,
        "recall": r,
        "f1": f,
        "macro_f1": sum(v["f1"] for v in per_type.values()) / max(len(per_type), 1),
        "per_type": per_type,
        "exact_match": sum(g == q for g, q in zip(gold_sets, pred_sets)) / max(len(gold_sets), 1),
    }
