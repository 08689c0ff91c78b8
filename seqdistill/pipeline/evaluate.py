"""``distill-eval`` and ``distill-predict``: score and use teachers and students alike.

A model directory is a teacher (``teacher.json``, or a Hugging Face token-classification
checkpoint) or a student (``config.json`` with a seqdistill ``arch``). Both are wrapped as a
:class:`Tagger` with a ``predict`` over batches of words, so that teacher and student are compared
on one test set, on one machine, in one command.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import click
import torch

from ..cache_schema.labels import tags_to_spans
from ..metrics import span_scores, span_set_scores
from .corpora import FORMATS, CorpusError, read_corpus


@dataclass
class Tagger:
    name: str
    kind: str  # teacher | student
    scheme: str
    params: int
    params_without_embeddings: int
    predict_batch: object  # list[list[str]] -> list[list[str]]
    predict_spans_batch: object = None  # per-type models: list[list[str]] -> nested (start, end, type) spans

    def predict(self, sentences: list[list[str]], batch_size: int = 64) -> list[list[str]]:
        return self._in_batches(self.predict_batch, sentences, batch_size)

    def predict_spans(self, sentences: list[list[str]], batch_size: int = 64) -> list[list[tuple[int, int, str]]]:
        """Entity spans: nested across types for a per-type (BILOU) model, else those of the flat tags."""
        if self.predict_spans_batch is not None:
            return self._in_batches(self.predict_spans_batch, sentences, batch_size)
        return [tags_to_spans(tags, self.scheme) for tags in self.predict(sentences, batch_size)]

    @staticmethod
    def _in_batches(fn, sentences, batch_size):
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        out: dict[int, list] = {}
        for s in range(0, len(order), batch_size):
            idx = order[s: s + batch_size]
            for i, pred in zip(idx, fn([sentences[i] for i in idx])):
                out[i] = pred
        return [out[i] for i in range(len(sentences))]


def _parameters(model: torch.nn.Module) -> tuple[int, int]:
    """All parameters, and those outside the word embedding matrix (the largest nn.Embedding or
    nn.EmbeddingBag): paper 003's Table 1 counts both."""
    total = sum(p.numel() for p in model.parameters())
    embeddings = [m.weight.numel() for m in model.modules()
                  if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag))]
    return total, total - max(embeddings, default=0)


def load_tagger(directory, device: str = "cpu", trust_remote_code: bool = False) -> Tagger:
    d = Path(directory)
    config = d / "config.json"
    if config.exists() and "arch" in json.loads(config.read_text()):
        from ..students.models import load_student
        from ..students.common import predict_tags

        model, tokenizer = load_student(d, device)
        spans = None
        if model.config.arch == "rnn-tagger":
            from ..students.rnn import predict_spans

            spans = lambda words: predict_spans(model, tokenizer, words, batch_size=len(words))  # noqa: E731
        return Tagger(d.name, "student", model.config.schema.scheme, *_parameters(model),
                      predict_batch=lambda words: predict_tags(model, tokenizer, words, batch_size=len(words)),
                      predict_spans_batch=spans)
    from ..teachers import load_teacher

    teacher = load_teacher(d, trust_remote_code=trust_remote_code, device=device)
    return Tagger(d.name, "teacher", teacher.schema.scheme, *_parameters(teacher),
                  predict_batch=lambda words: teacher.predict(words),
                  predict_spans_batch=getattr(teacher, "predict_spans", None))


def latency(tagger: Tagger, sentences: list[list[str]], batch_size: int, batches: int = 20) -> float:
    """Median milliseconds per sentence over ``batches`` batches of ``batch_size`` sentences."""
    times = []
    with torch.inference_mode():
        tagger.predict_batch(sentences[:batch_size])  # warm-up
        for i in range(batches):
            start = (i * batch_size) % max(1, len(sentences) - batch_size)
            batch = sentences[start: start + batch_size]
            t0 = time.perf_counter()
            tagger.predict_batch(batch)
            times.append((time.perf_counter() - t0) * 1000 / len(batch))
    return statistics.median(times)


def evaluate_taggers(model_dirs: list[str], data: str, *, fmt: str = "auto", with_latency: bool = True,
                     device: str = "cpu", threads: int | None = None) -> list[dict]:
    """Scores (seqeval CoNLL micro P/R/F1, per type, macro F1, exact match), size and latency."""
    if threads:
        torch.set_num_threads(threads)
    corpus = read_corpus(data, "eval", "test", format=fmt)
    if not (corpus.labelled or corpus.nested):
        raise CorpusError(data, None, "evaluation needs gold tags or entities")
    results = []
    for d in model_dirs:
        tagger = load_tagger(d, device)
        words = [s.words for s in corpus.sentences]
        if corpus.nested:  # every gold entity counts; flat models can only find the non-overlapping ones
            scores = span_set_scores([s.entities for s in corpus.sentences], tagger.predict_spans(words))
        else:
            gold = [s.tags for s in corpus.to_scheme(tagger.scheme).sentences]
            scores = span_scores(gold, tagger.predict(words), tagger.scheme)
        row = {"model": str(d), "kind": tagger.kind, "params": tagger.params,
               "params_without_embeddings": tagger.params_without_embeddings, "nested": corpus.nested, **scores}
        if with_latency:
            row["ms_per_sentence_batch1"] = latency(tagger, words, 1, 50)
            row["ms_per_sentence_batch32"] = latency(tagger, words, 32, 10)
        results.append(row)
    return results


def _ratio(base: float, other: float, smaller: str, larger: str) -> str:
    """``base / other`` said as a factor of at least 1: "2.0x fewer parameters", not "0.5x"."""
    return f"{base / other:.1f}x {smaller}" if base >= other else f"{other / base:.1f}x {larger}"


def format_results(rows: list[dict]) -> str:
    lines = ["| model | kind | params | w/o emb. | P | R | F1 | macro F1 | exact | ms/sent b1 | ms/sent b32 |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lat = [f"{r[k]:.2f}" if k in r else "-" for k in ("ms_per_sentence_batch1", "ms_per_sentence_batch32")]
        lines.append(f"| {r['model']} | {r['kind']} | {r['params']:,} | {r['params_without_embeddings']:,} | "
                     f"{100 * r['precision']:.2f} | "
                     f"{100 * r['recall']:.2f} | {100 * r['f1']:.2f} | {100 * r['macro_f1']:.2f} | "
                     f"{100 * r['exact_match']:.1f} | {lat[0]} | {lat[1]} |")
    if len(rows) > 1 and "ms_per_sentence_batch32" in rows[0]:
        base = rows[0]
        for r in rows[1:]:
            lines.append(f"\n{r['model']} vs {base['model']}: "
                         f"{_ratio(base['params'], r['params'], 'fewer parameters', 'more parameters')}, "
                         f"{_ratio(base['ms_per_sentence_batch1'], r['ms_per_sentence_batch1'], 'faster', 'slower')}"
                         f" at batch 1, "
                         f"{_ratio(base['ms_per_sentence_batch32'], r['ms_per_sentence_batch32'], 'faster', 'slower')}"
                         f" at batch 32, F1 {100 * (r['f1'] - base['f1']):+.2f}")
    for r in rows:
        types = ", ".join(f"{t} {100 * v['f1']:.1f}" for t, v in sorted(r["per_type"].items()))
        lines.append(f"\n{r['model']} per type F1: {types}")
    return "\n".join(lines)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--model", "models", multiple=True, required=True, help="Teacher or student directory (repeatable).")
@click.option("--data", required=True, help="Labelled corpus to score on (CoNLL or JSONL).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True)
@click.option("--no-latency", is_flag=True, help="Skip the latency measurement.")
@click.option("--threads", type=int, default=None, help="torch threads (default: torch's).")
@click.option("--device", default="cpu", show_default=True)
@click.option("--json", "as_json", is_flag=True)
def eval_main(models, data, fmt, no_latency, threads, device, as_json) -> None:
    """Score teachers and students on one labelled corpus: seqeval CoNLL micro P/R/F1, per-type
    F1, macro F1, exact-sentence match, parameters, and ms/sentence at batch 1 and 32 (with the
    ratios against the first model)."""
    try:
        rows = evaluate_taggers(list(models), data, fmt=fmt, with_latency=not no_latency, device=device,
                                threads=threads)
    except (CorpusError, FileNotFoundError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    click.echo(json.dumps(rows, indent=1) if as_json else format_results(rows))


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--model", required=True, help="Teacher or student directory.")
@click.option("--input", "input_path", required=True, help="CoNLL, JSONL or raw text (a sentence per line).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True)
@click.option("--output", "output_path", required=True, help="Where to write the tags.")
@click.option("--output-format", type=click.Choice(["conll", "jsonl"]), default="conll", show_default=True)
@click.option("--device", default="cpu", show_default=True)
def predict_main(model, input_path, fmt, output_path, output_format, device) -> None:
    """Tag a corpus with a teacher or a student (no cache needed)."""
    try:
        corpus = read_corpus(input_path, "input", "predict", format=fmt, labelled=False)
        tagger = load_tagger(model, device)
    except (CorpusError, FileNotFoundError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    words = [s.words for s in corpus.sentences]
    tags = tagger.predict(words)
    with open(output_path, "w", encoding="utf-8") as f:
        for w, t in zip(words, tags):
            if output_format == "jsonl":
                f.write(json.dumps({"words": w, "tags": t}, ensure_ascii=False) + "\n")
            else:
                f.write("".join(f"{a} {b}\n" for a, b in zip(w, t)) + "\n")
    click.echo(f"{len(words):,} sentences tagged by {tagger.kind} {tagger.name} -> {output_path}")
