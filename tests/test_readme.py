"""Issue 65, item 5: the README's "Your data" commands, run exactly as written (extracted from the
README's marked blocks, not copied here), on tiny data, so that the README cannot drift from the
code. The Hub ids they name are tiny random models placed in huggingface_hub's cache layout and
read with HF_HUB_OFFLINE=1: a token classifier with the toy data's labels for the NER model, a
plain encoder for the model fine-tuned here."""

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
BEGIN, END = "<!-- your-data: begin -->", "<!-- your-data: end -->"
NO_LABELS = "<!-- no-labels: begin -->", "<!-- no-labels: end -->"
LABELS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]


def readme_commands(begin: str = BEGIN, end: str = END) -> list[str]:
    """The shell commands of the README's sh blocks between the markers (the your-data ones by
    default): comments dropped, backslash continuations joined, one command a line."""
    text = README.read_text()
    assert text.count(begin) == 1 and text.count(end) == 1, f"README: the markers {begin}"
    section = text[text.index(begin) : text.index(end)]
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        joined = re.sub(r"\\\n\s*", "", block)
        for line in joined.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            if line:
                commands.append(line)
    return commands


def _hub_snapshot(root: Path, repo_id: str) -> Path:
    """The snapshot directory of ``repo_id`` in huggingface_hub's cache layout
    (models--ORG--NAME/snapshots/COMMIT, refs/main naming it), as a download leaves it."""
    commit = "0" * 40
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return repo / "snapshots" / commit


def _hub_model(root: Path, repo_id: str, tiny_encoder: str, classifier: bool) -> None:
    """``repo_id``, a token classifier or a plain encoder, in huggingface_hub's cache layout."""
    from transformers import AutoModel, AutoTokenizer, BertForTokenClassification

    snap = _hub_snapshot(root, repo_id)
    if classifier:
        model = BertForTokenClassification.from_pretrained(
            tiny_encoder,
            num_labels=len(LABELS),
            id2label=dict(enumerate(LABELS)),
            label2id={t: i for i, t in enumerate(LABELS)},
        )
    else:
        model = AutoModel.from_pretrained(tiny_encoder)
    model.save_pretrained(snap)
    AutoTokenizer.from_pretrained(tiny_encoder).save_pretrained(snap)


def _toy_files(d: Path) -> None:
    """my.conll: 100 sentences in 10 documents; raw.txt: 30 sentences, one a line."""
    rng = random.Random(0)
    lines, raw = [], []
    for i in range(100):
        if i % 10 == 0:
            lines += ["-DOCSTART- O", ""]
        name, city = rng.choice(["peter", "anna"]), rng.choice(["paris", "rome"])
        sent = [(name, "B-PER"), ("visits", "O"), *[("the", "O")] * rng.randint(0, 3), (city, "B-LOC")]
        lines += [f"{w} {t}" for w, t in sent] + [""]
    for _ in range(30):
        raw.append(f"{rng.choice(['peter', 'anna'])} visits {rng.choice(['paris', 'rome'])}")
    (d / "my.conll").write_text("\n".join(lines) + "\n")
    (d / "raw.txt").write_text("\n".join(raw) + "\n")


def _run_as_written(commands: list[str], work: Path, hub: Path) -> list[str]:
    """Each command in ``work`` (made, with the toy files) by bash, offline against ``hub``; their
    stdout, each asserted to succeed."""
    work.mkdir()
    _toy_files(work)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(hub),
        "TOKENIZERS_PARALLELISM": "false",
    }
    outputs = []
    for command in commands:
        r = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True)
        assert r.returncode == 0, f"README command failed: {command}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        outputs.append(r.stdout)
    return outputs


def test_the_readmes_your_data_commands_run_as_written(tiny_encoder, tmp_path):
    commands = readme_commands()
    tools = [c.split()[0] for c in commands]
    assert tools.count("distill-cache") >= 2 and {"distill-train", "distill-export", "distill-eval"} <= set(tools)
    ids = {m for c in commands for m in re.findall(r"--(?:teacher|encoder|model) ([\w.-]+/[\w.-]+)(?:\s|$)", c)}
    ids = {i for i in ids if not i.endswith("/")}  # Hub ids (ORG/NAME), not the local directories (DIR/)
    assert ids, "the README's path names a model by its Hub id"
    hub = tmp_path / "hub"
    for repo_id in ids:
        used_as = {m for c in commands for m in re.findall(rf"--(\w+) {re.escape(repo_id)}", c)}
        _hub_model(hub, repo_id, tiny_encoder, classifier="encoder" not in used_as)
    work = tmp_path / "work"
    outputs = _run_as_written(commands, work, hub)
    assert (work / "student-onnx" / "export.json").exists()
    (i,) = [i for i, c in enumerate(commands) if c.startswith("distill-eval")]
    table = outputs[i]  # distill-eval's table: a row for each model it names, with its test F1
    rows = [line for line in table.splitlines() if line.startswith("|") and "---" not in line][1:]
    assert len(rows) == commands[i].count("--model"), table
    header = [h.strip() for h in table.splitlines()[0].split("|")]
    f1 = [float(row.split("|")[header.index("F1")]) for row in rows]
    assert f1[-1] >= 90.0, table  # the student learnt the toy task (names and cities)


def test_the_readmes_no_labels_commands_run_as_written(tiny_encoder, tmp_path):
    """Issue 71: the "No labels?" path, as written: the GLiNER it names by Hub id is a tiny random
    GLiNER over the tiny BERT, saved with pickled weights (pytorch_model.bin) as that repository
    holds them, in huggingface_hub's cache layout; the types are named as written, and the cache's
    manifest records those names and tags and the export tags with IOB2 over those tags."""
    import torch
    from gliner import GLiNER

    commands = readme_commands(*NO_LABELS)
    assert [c.split()[0] for c in commands] == ["distill-cache", "distill-train", "distill-export"]
    (repo_id,) = {m for c in commands for m in re.findall(r"--teacher ([\w.-]+/[\w.-]+)(?:\s|$)", c)}
    hub, work = tmp_path / "hub", tmp_path / "work"
    torch.manual_seed(0)
    model = GLiNER.from_config({"model_name": tiny_encoder, "hidden_size": 32, "max_width": 4, "max_len": 32})
    model.save_pretrained(_hub_snapshot(hub, repo_id), safe_serialization=False)
    _run_as_written(commands, work, hub)
    (types,) = {m for c in commands for m in re.findall(r"--entity-types (\S+)", c)}
    named = dict(pair.split("=") for pair in types.split(","))  # the names the model reads -> the tags
    assert len(named) >= 2, types
    cache = re.search(r"--out (\S+)", commands[0]).group(1)  # distill-cache build's
    manifest = json.loads((work / cache / "manifest.json").read_text())
    (teacher,) = manifest["teachers"]
    assert teacher["kind"] == "span" and teacher["decoding"]["entity_types"] == named
    meta = json.loads((work / "student-onnx" / "export.json").read_text())
    tags = sorted(named.values())
    schema = meta["label_schema"]
    assert schema["scheme"] == "IOB2" and schema["entity_types"] == tags
    assert schema["tags"] == ["O", *(f"{p}-{t}" for t in tags for p in "BI")]
