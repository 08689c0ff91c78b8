"""Model cards: ``README.md`` in a student, teacher or exported directory, written from measured
figures by ``distill-eval --card``, never typed by hand.

A card is what the Hugging Face Hub shows for a model folder: YAML front matter between ``---``
lines, then Markdown. Decisions, named here:

* The front matter is written as JSON, which is YAML too: the Hub and ``huggingface_hub.ModelCard``
  read it as YAML, and seqdistill (``distill-serve``'s ``/info``) reads it back with ``json``, with
  no YAML writer needed. Under ``seqdistill`` it holds every figure of the card (the eval row, the
  provenance, the machine), so that the Markdown below is only a rendering of it.
* Provenance comes from the directory's ``training.json``: a student's (the engine writes the
  cache's identity, its teachers' fingerprints and the corpora with their sizes), copied into an
  exported directory by ``distill-export``; a teacher's (``finetune-teacher``: its encoder and
  training corpus size).
* A ``README.md`` that seqdistill did not write is never overwritten: the card refuses, naming it.
* The latency is the eval's median ms/sentence, with the machine named (CPU model, cores, the
  threads the model ran on) and the date: figures from another machine are not comparable.

The folder then works with ``huggingface_hub.upload_folder(folder_path=DIR, repo_id=...)`` as it
stands (README.md at the top, weights in safetensors or ONNX, the tokenizer beside them); pushing
is not tested here (the machines have no network).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path

from ..version import __version__
from ..vocabulary import UNSEEN_RULE

MARK = "<!-- seqdistill model card: written by distill-eval --card; edits are replaced -->"


class CardError(ValueError):
    pass


def machine(threads) -> dict:
    """The machine the figures were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "threads": threads, "gpu": None, "os": platform.system()}


def read_card(model_dir) -> dict | None:
    """The ``seqdistill`` data of a directory's card (None without a seqdistill card)."""
    path = Path(model_dir) / "README.md"
    if not path.exists():
        return None
    text = path.read_text()
    if not text.startswith("---\n") or MARK not in text:
        return None
    front = text[4 : text.index("\n---\n", 4)]
    try:
        return json.loads(front).get("seqdistill")
    except ValueError:
        return None


def card_data(model_dir, row: dict, data: str, command: str) -> dict:
    """Everything the card says: the eval ``row`` of ``distill-eval`` on ``data``, the directory's
    provenance, the machine."""
    d = Path(model_dir)
    training = json.loads((d / "training.json").read_text()) if (d / "training.json").exists() else {}
    export = json.loads((d / "export.json").read_text()) if (d / "export.json").exists() else {}
    config = json.loads((d / "config.json").read_text()) if (d / "config.json").exists() else {}
    extra = config.get("extra", {})
    teachers = (training.get("provenance") or {}).get("teachers") or {}
    teacher = (
        extra.get("teacher")
        or (training.get("config") or {}).get("teacher")
        or training.get("teachers")
        or (next(iter(teachers)) if len(teachers) == 1 else None)
    )
    vocabulary = export.get("vocabulary")
    if vocabulary is None and config.get("teacher_vocab_size"):
        vocabulary = {"kept": config["vocab_size"] - 1, "teacher": config["teacher_vocab_size"], "unseen": UNSEEN_RULE}
    return {
        "tool_version": __version__,
        "date": datetime.date.today().isoformat(),
        "kind": row["kind"],
        "runtime": row.get("runtime", "torch"),
        "quantize": export.get("quantize"),
        "recipe": training.get("recipe") or extra.get("recipe"),
        "teacher": ", ".join(teacher) if isinstance(teacher, list) else teacher,
        "architecture": config.get("arch") or export.get("model"),
        "encoder": training.get("encoder"),
        "provenance": training.get("provenance"),
        "train_sentences": training.get("train_sentences"),
        "best_dev_f1": training.get("best_dev_f1"),
        "test": {
            "data": str(data),
            "precision": row["precision"],
            "recall": row["recall"],
            "f1": row["f1"],
            "macro_f1": row["macro_f1"],
            "per_type_f1": {t: v["f1"] for t, v in sorted(row["per_type"].items())},
        },
        "parameters": {"all": row["params"], "without_embeddings": row["params_without_embeddings"]},
        "vocabulary": vocabulary,
        "embedding_rows": row.get("embedding_rows"),
        "bytes": row.get("bytes"),
        "words": export.get("words") or extra.get("words"),
        "latency_ms_per_sentence": {
            "batch1": row.get("ms_per_sentence_batch1"),
            "batch32": row.get("ms_per_sentence_batch32"),
        },
        "machine": machine(row.get("threads")),
        "command": command,
    }


def _vocabulary(v: dict | None, rows: int | None) -> str | None:
    """The card's vocabulary line: how many embedding rows the model holds, and of what."""
    if v:
        return (
            f"{v['kept'] + 1:,} embedding rows: {v['kept']:,} of the teacher's {v['teacher']:,} subwords, and one row "
            f"that every other subword reads ({v['unseen']}, seqdistill.vocabulary)"
        )
    if rows:
        return f"{rows:,} embedding rows: every subword of the teacher's vocabulary"
    return None


def render(card: dict) -> str:
    """The card's README.md: front matter (JSON, read as YAML by the Hub), then Markdown."""
    front = {
        "library_name": "seqdistill",
        "pipeline_tag": "token-classification",
        "tags": ["token-classification", "ner", "knowledge-distillation", "seqdistill"],
        "seqdistill": card,
    }
    test, prov = card["test"], card.get("provenance") or {}
    what = {"student": "a distilled student", "teacher": "a teacher"}.get(card["kind"], card["kind"])
    lines = [
        "---",
        json.dumps(front, indent=1),
        "---",
        MARK,
        "",
        f"# {card['architecture'] or card['kind']}: {what} ({card['runtime']})",
        "",
        "Load it with `seqdistill.Tagger.load(DIR)` or run `distill-predict --model DIR` (seqdistill).",
        "",
        "| | |",
        "|---|---|",
    ]
    rows = [
        ("recipe", card.get("recipe")),
        ("teacher layer", card.get("teacher")),
        ("encoder", card.get("encoder")),
        ("cache", prov.get("cache")),
        ("cache fingerprint", prov.get("cache_fingerprint")),
        (
            "parameters",
            f"{card['parameters']['all']:,} ({card['parameters']['without_embeddings']:,} without embeddings)",
        ),
        ("vocabulary", _vocabulary(card.get("vocabulary"), card.get("embedding_rows"))),
        ("size on disk", f"{card['bytes'] / 2**20:,.1f} MB, every file" if card.get("bytes") else None),
        ("words rule", card.get("words")),
        ("test data", test["data"]),
        ("test F1 (micro)", f"{100 * test['f1']:.2f} (P {100 * test['precision']:.2f}, R {100 * test['recall']:.2f})"),
        ("test macro F1", f"{100 * test['macro_f1']:.2f}"),
    ]
    lat = card["latency_ms_per_sentence"]
    if lat["batch1"] is not None:
        m = card["machine"]
        rows.append(
            (
                "latency",
                f"{lat['batch1']:.2f} ms/sentence at batch 1, {lat['batch32']:.2f} at batch 32 "
                f"({m['cpu']}, {m['cores']} cores, {m['threads']} thread(s), {card['date']})",
            )
        )
    lines += [f"| {k} | {v} |" for k, v in rows if v is not None]
    lines += ["", "Per-type test F1:", "", "| type | F1 |", "|---|---:|"]
    lines += [f"| {t} | {100 * f:.2f} |" for t, f in test["per_type_f1"].items()]
    if prov.get("teachers"):
        lines += ["", "Teachers in the cache (sha256 fingerprints of their files):", ""]
        for name, t in prov["teachers"].items():
            fps = ", ".join(f"{k} `{v[:16]}`" for k, v in sorted(t["fingerprints"].items()))
            lines.append(f"- `{name}` ({t['kind']}): {fps}")
    if prov.get("corpora"):
        lines += [
            "",
            "Training and dev corpora:",
            "",
            "| corpus | split | labelled | sentences | words |",
            "|---|---|---|---:|---:|",
        ]
        lines += [
            f"| {c['corpus']} | {c['split']} | {'yes' if c['labelled'] else 'no'} | {c['sentences']:,} | {c['words']:,} |"
            for c in prov["corpora"]
        ]
    lines += ["", f"Figures measured by `{card['command']}` (seqdistill {card['tool_version']}).", ""]
    return "\n".join(lines)


def write_card(model_dir, row: dict, data: str, command: str) -> Path:
    """Write or refresh ``model_dir/README.md`` from the eval ``row``; refuse to replace a README
    that seqdistill did not write."""
    path = Path(model_dir) / "README.md"
    if path.exists() and MARK not in path.read_text():
        raise CardError(
            f"{path}: a README.md that distill-eval did not write; move it aside to write the model card there"
        )
    path.write_text(render(card_data(model_dir, row, data, command)))
    return path
