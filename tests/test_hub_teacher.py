"""Issue 65, item 2: a teacher named by its Hugging Face Hub id, resolved through huggingface_hub's
own cache, with no network (HF_HUB_OFFLINE=1)."""

import json
import os
import subprocess
import sys
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"
LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def _hub_cache(tiny_encoder, root: Path) -> Path:
    """A token classifier saved as a user saves one, placed in huggingface_hub's cache layout
    (models--ORG--NAME/snapshots/COMMIT, refs/main naming the commit) as a download leaves it."""
    from transformers import AutoTokenizer, BertForTokenClassification

    repo = root / "models--acme--tiny-ner"
    snap = repo / "snapshots" / COMMIT
    model = BertForTokenClassification.from_pretrained(
        tiny_encoder,
        num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)),
        label2id={t: i for i, t in enumerate(LABELS)},
    )
    model.save_pretrained(snap)
    AutoTokenizer.from_pretrained(tiny_encoder).save_pretrained(snap)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return root


def _run(args, cache: Path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "TOKENIZERS_PARALLELISM": "false"}
    exe = Path(sys.executable).parent / "distill-cache"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env)


def test_a_hub_id_builds_a_cache_offline_and_a_missing_one_is_named(tiny_encoder, tmp_path):
    cache = _hub_cache(tiny_encoder, tmp_path / "hub")
    corpus = tmp_path / "train.txt"
    corpus.write_text("Anna B-PER\nvisits O\nRome B-LOC\n\nPeter B-PER\n\n")
    out = tmp_path / "cache"
    r = _run(["build", "--out", str(out), "--teacher", "acme/tiny-ner", "--labelled", f"toy={corpus}@train"], cache)
    assert r.returncode == 0, r.stdout + r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    (teacher,) = manifest["teachers"]
    assert teacher["id"] == "tiny-ner" and teacher["kind"] == "softmax"  # the id's name, not the snapshot's commit
    assert teacher["source"].endswith(f"models--acme--tiny-ner/snapshots/{COMMIT}")
    r = _run(
        ["build", "--out", str(tmp_path / "c2"), "--teacher", "acme/absent", "--labelled", f"toy={corpus}@train"], cache
    )
    assert r.returncode == 1
    assert "acme/absent" in r.stderr and "offline (HF_HUB_OFFLINE=1) and not in the hub cache" in r.stderr
    assert not (tmp_path / "c2" / "manifest.json").exists()
    r = _run(
        ["build", "--out", str(tmp_path / "c3"), "--teacher", "no-such-dir", "--labelled", f"toy={corpus}@train"], cache
    )
    assert r.returncode == 1 and "no such" in r.stderr


def test_an_encoder_missing_from_the_hub_cache_offline_is_named(tmp_path):
    corpus = tmp_path / "train.txt"
    corpus.write_text("Anna B-PER\nvisits O\nRome B-LOC\n\nPeter B-PER\n\n")
    out = tmp_path / "teacher"
    args = ["finetune-teacher", "--encoder", "acme/absent-encoder", "--train", str(corpus), "--dev", str(corpus)]
    r = _run([*args, "--out", str(out)], tmp_path / "hub")
    assert r.returncode == 1
    assert "acme/absent-encoder: not a local directory" in r.stderr
    assert "offline (HF_HUB_OFFLINE=1) and not in the hub cache" in r.stderr
    assert not (out / "teacher.json").exists()
