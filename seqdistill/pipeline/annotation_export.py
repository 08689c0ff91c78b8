"""The rows ``distill-cache select`` picks, out to an annotation tool with a teacher's spans as
pre-annotations (issue 37): Label Studio tasks (``predictions`` with scores) and span JSONL in the
Prodigy/spaCy style. ``corpora/annotations.py`` reads both formats back as labelled corpora.

Decisions, named here:

* A task's text is its words joined by one space, and the words travel with it (``data.words``,
  span JSONL ``tokens``), so that the annotations come back on the cache's own words.
* Pre-annotations are each teacher's best path (k-best path 1, or the argmax of a token teacher's
  logits) as spans. A prediction's score is the path's probability (as ``select`` computes it); a
  span's score is the mean over its words of the probability of the path's tag: the CRF marginal
  when the layer stores marginals, the softmax probability for a token teacher, else the path's
  probability. With several teachers (``--strategy disagreement``) a Label Studio task gets one
  prediction per teacher (``model_version`` is the teacher's layer name); span JSONL carries the
  first teacher's spans.
* The Label Studio labelling config that these tasks fit (``label_studio_config``) is written
  beside them (``FILE.config.xml``): a ``Labels`` control named ``label`` over a ``Text`` named
  ``text``, one label per entity type.
"""

from __future__ import annotations

import json
from pathlib import Path
from xml.sax.saxutils import quoteattr

import numpy as np

from ..cache_schema import EXAMPLES_LAYER, CacheError, CacheReader
from ..cache_schema.labels import tags_to_spans
from ..corpora.words import join_words
from .select import SEQUENCE_FIELDS, Pick, scoring_fields, two_best

FORMATS = ("rows", "label-studio", "spans")


def pre_annotating(reader: CacheReader, names: list[str] | None) -> list[str]:
    """The teacher layers whose spans pre-annotate: those named, or every one with paths or logits."""
    layers = [n for n, layer in reader.manifest.layers.items() if layer.kind == "teacher" and (not names or n in names)]
    usable = []
    for name in layers:
        if scoring_fields({f.name for f in reader.manifest.layers[name].fields}):
            usable.append(name)
    if not usable:
        raise CacheError("no teacher layer with k-best paths or logits to pre-annotate the rows")
    return usable


def predictions(reader: CacheReader, picks: list[Pick], teachers: list[str]) -> dict[str, dict[str, dict]]:
    """``{teacher: {example_id: {"score", "spans": [(start, end, type, score)]}}}`` for the picks."""
    schema = reader.manifest.label_schema
    wanted = {p.example_id for p in picks}
    out: dict[str, dict[str, dict]] = {t: {} for t in teachers}
    for teacher in teachers:
        have = {f.name for f in reader.manifest.layers[teacher].fields}
        seq = scoring_fields(have) == list(SEQUENCE_FIELDS)
        fields = list(SEQUENCE_FIELDS) + (["marginals"] if "marginals" in have else []) if seq else ["logits"]
        for shard in reader.iter_shards({EXAMPLES_LAYER: ["n_words"], teacher: fields}):
            for i, eid in enumerate(shard.example_ids):
                if eid not in wanted:
                    continue
                p1, _ = two_best(shard, teacher, list(SEQUENCE_FIELDS) if seq else ["logits"], i)
                if seq:
                    path = np.asarray(shard.get(teacher, "kbest_paths")[i].as_py()[0])
                    probs = (
                        np.asarray(shard.get(teacher, "marginals")[i], dtype=np.float64)
                        if "marginals" in fields
                        else None
                    )
                else:
                    logits = np.asarray(shard.get(teacher, "logits")[i], dtype=np.float64)
                    probs = np.exp(logits - np.logaddexp.reduce(logits, axis=1, keepdims=True))
                    path = probs.argmax(1)
                tags = [schema.tags[t] for t in path]
                word_p = probs[np.arange(len(path)), path] if probs is not None else np.full(len(path), p1)
                spans = [(s, e, t, float(word_p[s:e].mean())) for s, e, t in tags_to_spans(tags, schema.scheme)]
                out[teacher][eid] = {"score": p1, "spans": spans}
    return out


def label_studio_tasks(picks: list[Pick], preds: dict[str, dict[str, dict]]) -> list[dict]:
    tasks = []
    for p in picks:
        text, offsets = join_words(p.words)
        task = {
            "data": {"text": text, "words": p.words, "example_id": p.example_id, "select_score": p.score},
            "predictions": [],
        }
        for teacher, rows in preds.items():
            pred = rows[p.example_id]
            result = [
                {
                    "id": f"{p.example_id}-{teacher}-{j}",
                    "from_name": "label",
                    "to_name": "text",
                    "type": "labels",
                    "value": {
                        "start": offsets[s][0],
                        "end": offsets[e - 1][1],
                        "text": text[offsets[s][0] : offsets[e - 1][1]],
                        "labels": [t],
                    },
                    "score": score,
                }
                for j, (s, e, t, score) in enumerate(pred["spans"])
            ]
            task["predictions"].append({"model_version": teacher, "score": pred["score"], "result": result})
        tasks.append(task)
    return tasks


def span_lines(picks: list[Pick], preds: dict[str, dict[str, dict]]) -> list[dict]:
    teacher = next(iter(preds))
    lines = []
    for p in picks:
        text, offsets = join_words(p.words)
        pred = preds[teacher][p.example_id]
        lines.append(
            {
                "text": text,
                "tokens": [
                    {"text": w, "start": a, "end": b, "id": i} for i, (w, (a, b)) in enumerate(zip(p.words, offsets))
                ],
                "spans": [
                    {
                        "start": offsets[s][0],
                        "end": offsets[e - 1][1],
                        "label": t,
                        "token_start": s,
                        "token_end": e - 1,  # inclusive, as Prodigy writes it
                        "score": score,
                    }
                    for s, e, t, score in pred["spans"]
                ],
                "meta": {
                    "example_id": p.example_id,
                    "select_score": p.score,
                    "teacher": teacher,
                    "path_score": pred["score"],
                },
            }
        )
    return lines


def label_studio_config(entity_types) -> str:
    labels = "\n".join(f"    <Label value={quoteattr(t)}/>" for t in entity_types)
    return f'<View>\n  <Labels name="label" toName="text">\n{labels}\n  </Labels>\n  <Text name="text" value="$text"/>\n</View>\n'


def write_annotation_tasks(reader: CacheReader, picks: list[Pick], teachers: list[str] | None, fmt: str, path) -> None:
    """Write the picks as Label Studio tasks (and their labelling config beside them) or span JSONL,
    pre-annotated by ``teachers`` (None: every teacher layer that can); each file written whole,
    then renamed."""
    out = Path(path)
    preds = predictions(reader, picks, pre_annotating(reader, teachers))
    if fmt == "label-studio":
        body = json.dumps(label_studio_tasks(picks, preds), ensure_ascii=False, indent=1) + "\n"
        _atomic(out.with_name(out.name + ".config.xml"), label_studio_config(reader.manifest.label_schema.entity_types))
    else:
        body = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in span_lines(picks, preds))
    _atomic(out, body)


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
