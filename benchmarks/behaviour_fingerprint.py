"""The sha256 of everything the tool writes, from tiny models and corpora made here: the proof that a
refactor changed no behaviour (issue 33).

    .venv/bin/python benchmarks/behaviour_fingerprint.py --out /tmp/fp-before.json
    ... change the code ...
    .venv/bin/python benchmarks/behaviour_fingerprint.py --out /tmp/fp-after.json --compare /tmp/fp-before.json

It runs the commands a user runs, through their console scripts (so it works across moves of the
code behind them), on one thread each (the same arithmetic on every run):

* ``distill-cache finetune-teacher`` for each teacher kind (crf, softmax, bilou-per-type, sentscore)
  over a tiny random BERT built from a config with a fixed seed;
* ``distill-cache build``: a crf cache with hidden layers, subwords and exported encoder layers,
  a softmax layer added to it, a bilou-per-type cache and a sentscore cache;
* ``distill-train`` for every recipe (mgkd, token-kd, xtremedistil, mt, rnn, sentscore), mgkd with
  each student architecture, its flags given (so that a change of defaults, issue 72, shows as none),
  and from two teachers at once (``--teachers``, issue 81);
* ``distill-export`` of a student and of a teacher, fp32 and int8.

Every file they write is hashed, except what records time or paths: the manifest's ``created``
(and the ``tool_version`` it names, and its own digest) are dropped before hashing, and training.json, metrics.jsonl,
checkpoints, model cards and export.json are left out (they hold seconds and absolute paths); in other JSON files the run's own directory is replaced by
``<root>`` (corpus paths in the manifest and layer headers, ``_name_or_path`` in configs), so that
runs in two directories compare. ``--rehash DIR`` hashes a kept run again without running it. With
``--compare`` it exits 1 naming each file whose hash differs or that one run lacks.
``FINGERPRINT_BIN=DIR`` runs the console scripts of DIR instead of this interpreter's (an older
checkout's entry points, say).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import string
import subprocess
import sys
import tempfile
from pathlib import Path

LEFT_OUT = ("training.json", "metrics.jsonl", "export.json", "README.md", "config.toml")


def tiny_bert(d: Path) -> str:
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    chars = string.ascii_lowercase + string.digits
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, ".", ",", "-", *("##" + c for c in chars)]
    vocab += ["the", "eu", "peter", "paris", "rome", "anna", "visits", "##s"]
    vocab += [f"[unused{i}]" for i in range(20)]  # SenT' sentinels
    BertTokenizer(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True).save_pretrained(d)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(d)
    return str(d)


def toy_corpus(path: Path, n: int, seed: int, labelled: bool = True) -> str:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        name, city = rng.choice(["peter", "anna"]), rng.choice(["paris", "rome"])
        sent = [(name, "B-PER"), ("visits", "O"), *[("the", "O")] * rng.randint(0, 4), (city, "B-LOC")]
        lines += [f"{w} {t}" for w, t in sent] + [""] if labelled else [" ".join(w for w, _ in sent)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def run(tool: str, *args) -> None:
    exe = Path(os.environ.get("FINGERPRINT_BIN") or Path(sys.executable).parent) / tool
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    p = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{tool} {' '.join(map(str, args))} failed:\n{p.stdout}\n{p.stderr}")


def hashes(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if not p.is_file() or p.name in LEFT_OUT or "/checkpoint/" in f"/{rel}" or "/tensorboard/" in f"/{rel}":
            continue
        if rel.endswith(("/train.txt", "/dev.txt", "/raw.txt")) or "/.lock" in rel:
            continue
        data = p.read_bytes()
        if p.suffix == ".json":  # corpus and model paths name the run's own directory
            data = data.replace(str(root).encode(), b"<root>")
        if p.name == "manifest.json":
            m = json.loads(data)
            m.pop("created", None)
            m.pop("tool_version", None)
            m.pop("manifest_sha256", None)  # a digest of the rest, paths included
            data = json.dumps(m, sort_keys=True).encode()
        out[rel] = hashlib.sha256(data).hexdigest()
    return out


def fingerprint(d: Path) -> dict[str, str]:
    enc = tiny_bert(d / "encoder")
    train, dev = toy_corpus(d / "train.txt", 40, 0), toy_corpus(d / "dev.txt", 12, 1)
    raw = toy_corpus(d / "raw.txt", 30, 2, labelled=False)
    common = ["--train", train, "--dev", dev, "--device", "cpu", "--batch-size", "8", "--checkpoint-every", "3"]
    for head, extra in [
        ("crf", ["--epochs", "2", "--lr", "1e-3"]),
        ("softmax", ["--epochs", "2", "--lr", "1e-3"]),
        ("bilou-per-type", ["--epochs", "2", "--lr", "1e-3"]),
        ("sentscore", ["--epochs", "2", "--lr", "1e-2"]),
    ]:
        run(
            "distill-cache",
            "finetune-teacher",
            "--encoder",
            enc,
            "--out",
            d / "teachers" / head,
            "--head",
            head,
            *common,
            *extra,
        )
    t = d / "teachers"
    corpora = ["--labelled", f"toy={train}", "--labelled", f"toy={dev}@dev", "--unlabelled", f"raw={raw}"]
    build = ["--device", "cpu", "--shard-size", "16", *corpora]
    run("distill-cache", "build", "--out", d / "caches/crf", "--teacher", t / "crf", "--teacher-id", "small",
        "--hidden-layers", "1,2", "--subwords", "--export-layers", "1", "--kbest", "3", *build)  # fmt: skip
    run("distill-cache", "build", "--out", d / "caches/crf", "--teacher", t / "softmax", "--teacher-id", "wide",
        "--hidden-layers", "1,2", "--export-layers", "1", *build)  # fmt: skip
    run("distill-cache", "build", "--out", d / "caches/bilou", "--teacher", t / "bilou-per-type", *build)
    run("distill-cache", "build", "--out", d / "caches/sentscore", "--teacher", t / "sentscore", *build)
    small = ["--device", "cpu", "--batch-size", "8", "--patience", "5"]
    tiny = ["--embedding-dim", "8", "--hidden-size", "8"]
    s, c = d / "students", d / "caches"
    runs = {
        "mgkd": ["--cache", c / "crf", "--arch", "bilstm-crf", "--losses", "hard,seq-ce", "--k", "2", "--epochs", "2", "--teacher", "small", *tiny],
        "mgkd-cnn": ["--cache", c / "crf", "--arch", "cnn-crf", "--chars", "--lr", "3e-3", "--dropout", "0.2", "--lr-plateau", "--k", "2", "--epochs", "2", "--teacher", "small"],
        "mgkd-teachers": ["--cache", c / "crf", "--arch", "cnn-crf", "--chars", "--lr", "3e-3", "--dropout", "0.2", "--lr-plateau", "--k", "2", "--epochs", "2", "--teachers", "small,wide", "--losses", "hard,seq-ce,fuzzy,token-pos"],
        "token-kd": ["--cache", c / "crf", "--epochs", "2", "--teacher", "small", "--embedding", "random", *tiny],
        "xtremedistil": ["--cache", c / "crf", "--teacher", "small", "--schedule", "d3.1", "--teacher-layer", "1", "--epochs-per-step", "1", *tiny],
        "mt": ["--cache", c / "crf", "--teachers", "small,wide", "--student-layers", "1", "--init", "scratch", "--epochs", "2", "--lr", "3e-3"],
        "rnn": ["--cache", c / "bilou", "--cell", "sru", "--rnn-layers", "1", "--distill-epochs", "1", "--epochs", "1"],
        "sentscore": ["--cache", c / "sentscore", "--embedding", "random", "--epochs", "2", *tiny],
    }  # fmt: skip
    # mgkd-cnn: the mgkd recipe with the window CNN + CRF, every flag given; mgkd-teachers: the same from two teachers
    for name, args in runs.items():
        recipe = {"mgkd-cnn": "mgkd", "mgkd-teachers": "mgkd"}.get(name, name)
        run("distill-train", recipe, "--out", s / name, *small, *args)
    exports = [
        (s / "mgkd", "none"),
        (s / "mgkd-cnn", "int8"),
        (s / "rnn", "int8"),
        (s / "mt", "none"),
        (t / "crf", "int8"),
    ]
    for model, quantize in exports:
        run(
            "distill-export",
            "--model",
            model,
            "--out",
            d / "exports" / f"{model.name}-{quantize}",
            "--quantize",
            quantize,
        )
    return hashes(d)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="JSON file for {path: sha256}")
    ap.add_argument("--compare", default=None, help="an earlier run's JSON: exit 1 naming what differs")
    ap.add_argument("--keep", default=None, help="keep the run's files in this new directory")
    ap.add_argument("--rehash", default=None, help="hash the files of a kept run instead of running one")
    args = ap.parse_args()
    if args.rehash:
        found = hashes(Path(args.rehash))
    elif args.keep:
        Path(args.keep).mkdir(parents=True)
        found = fingerprint(Path(args.keep))
    else:
        with tempfile.TemporaryDirectory() as d:
            found = fingerprint(Path(d))
    Path(args.out).write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    print(f"{len(found)} files hashed -> {args.out}")
    if args.compare:
        before = json.loads(Path(args.compare).read_text())
        bad = sorted(k for k in set(before) | set(found) if before.get(k) != found.get(k))
        for k in bad:
            print(f"DIFFERS {k}: {before.get(k, 'missing')[:12]} -> {found.get(k, 'missing')[:12]}")
        print(f"{len(bad)} of {len(set(before) | set(found))} files differ")
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
