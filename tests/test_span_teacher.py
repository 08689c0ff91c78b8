"""Issue 71: a GLiNER-family span model as a teacher (``span`` kind), built from a config with no
download: its full span scores, windows and type groups, the cache it writes (checked against the
semi-CRF over its stored scores), a student trained from it, a Hub id offline, and bad input."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import toy_corpus

from seqdistill import semicrf
from seqdistill.cache_schema import CacheReader, verify_cache
from seqdistill.cli.cache import main as cache_cli
from seqdistill.teachers import LayerOptions, SpanOptions, load_teacher, parse_entity_types
from seqdistill.teachers.base import TeacherError
from seqdistill.teachers.span_model import SpanScorer, token_span_logits, type_groups, windows

TYPES = "person=PER,location=LOC"


def _gliner(encoder: str, out: Path, **config) -> str:
    """A tiny GLiNER over the tiny BERT, its head at random, saved as its package saves one."""
    from gliner import GLiNER

    torch.manual_seed(0)
    model = GLiNER.from_config(
        {"model_name": encoder, "hidden_size": 32, "max_width": 4, "max_len": 8, "max_types": 2, **config}
    )
    model.save_pretrained(out, safe_serialization=True)
    return str(out)


@pytest.fixture(scope="module")
def gliner_dir(tiny_encoder, tmp_path_factory):
    return _gliner(tiny_encoder, tmp_path_factory.mktemp("gliner") / "tiny-gliner")


def _teacher(d, types=TYPES, **span):
    return load_teacher(d, options=LayerOptions(3, span=SpanOptions(parse_entity_types(types), **span)))


@pytest.mark.unit
def test_windows_overlap_by_half_and_end_at_the_sentence_end():
    words = [list("abcdefghijkl"), list("abc")]
    got = [(p.sentence, p.offset, len(p.words)) for p in windows(words, 8)]
    assert got == [(0, 0, 8), (0, 4, 8), (1, 0, 3)]
    assert [(p.offset, len(p.words)) for p in windows([list("abcdefghijklmnopq")], 8)] == [
        (0, 8),
        (4, 8),
        (8, 8),
        (9, 8),
    ]
    assert type_groups(["a", "b", "c"], 2) == [["a", "b"], ["c"]]


@pytest.mark.unit
def test_token_level_span_logits_are_the_package_min_rule():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 5, 3, 3, generator=g)  # [B, L, C, (start, end, inside)]
    got = token_span_logits(scores, 4)
    for b in range(2):
        for i in range(5):
            for w in range(4):
                for c in range(3):
                    if i + w >= 5:
                        assert got[b, i, w, c] == float("-inf")
                        continue
                    parts = [scores[b, i, c, 0], scores[b, i + w, c, 1], *scores[b, i : i + w + 1, c, 2]]
                    assert got[b, i, w, c] == min(parts)


def test_type_groups_and_windows_join_single_passes(gliner_dir, tiny_encoder, tmp_path):
    """Types past max_types (2) go in groups whose scores are each a single pass over that group;
    a sentence longer than max_len (8) takes each span's scores from the single pass over the window
    where it sits furthest from an edge; a sentence that fits is one single pass."""
    teacher = _teacher(gliner_dir)
    model = teacher.gliner
    words = [["anna", "visits", "the", "rome"], [*"peter visits the the the the paris and rome and anna too".split()]]
    three = SpanScorer(model, ["person", "location", "city"])
    assert three.max_types == 2
    got = three.logits(words)
    for group in (["person", "location"], ["city"]):
        alone = SpanScorer(model, group)
        alone.max_types = 10
        want = alone.logits(words)
        cols = [["person", "location", "city"].index(n) for n in group]
        torch.testing.assert_close(got[..., cols], want)
    # the long sentence's spans against single passes over its windows (offsets 0 and 4 of 12 words)
    single = SpanScorer(model, ["person", "location"])
    long = words[1]
    model.config.max_len, single.max_len = 100, 100  # a model that reads 12 words at once
    whole = single.logits([long])
    model.config.max_len = 8
    pieces = {o: single.logits([long[o : o + 8]])[0] for o in (0, 4)}
    assert not torch.allclose(whole[0, :8, 0], pieces[0][:8, 0])  # context matters: the windows are not the whole
    for i in range(12):
        for w in range(4):
            if i + w >= 12:
                assert got[1, i, w, 0] == float("-inf")
                continue
            inside = [o for o in (0, 4) if o <= i and i + w < o + 8]
            margin = {o: min(1 << 20 if o == 0 else i - o, 1 << 20 if o + 8 == 12 else o + 7 - (i + w)) for o in inside}
            o = max(inside, key=lambda o: (margin[o], -o))
            torch.testing.assert_close(got[1, i, w, :2], pieces[o][i - o, w])
    short = single.logits([words[0]])
    torch.testing.assert_close(got[0, :4, :, :2], short[0])


def test_a_span_cache_holds_the_semicrf_of_its_own_scores_and_teaches_a_student(gliner_dir, tmp_path):
    """Each row's log Z, marginals, k-best log-probabilities, k-best paths (tag by tag) and gold NLL
    are the semi-CRF's over its own stored span logits; a student trained on the layer's losses ends
    nearer the teacher's marginals than a student of the gold tags alone; token-em is refused."""
    from seqdistill.students.recipes import train as train_student
    from seqdistill.students.recipes.mgkd import MGKDConfig

    train = toy_corpus(tmp_path / "train.txt", 24, 0)
    dev = toy_corpus(tmp_path / "dev.txt", 8, 1)
    raw = toy_corpus(tmp_path / "raw.txt", 10, 2, labelled=False)
    with open(raw, "a") as f:  # one sentence longer than the model's 8 words: windows
        f.write("peter visits the the the the paris and rome and anna too\n")
    out = tmp_path / "cache"
    args = ["build", "--out", str(out), "--teacher", gliner_dir, "--entity-types", TYPES, "--kbest", "4"]
    args += ["--labelled", f"toy={train}@train", "--labelled", f"toy={dev}@dev", "--unlabelled", f"raw={raw}"]
    r = CliRunner().invoke(cache_cli, [*args, "--span-threshold", "0.6", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert verify_cache(str(out)) == []
    manifest = json.loads((out / "manifest.json").read_text())
    (info,) = manifest["teachers"]
    assert info["kind"] == "span" and info["id"] == "tiny-gliner"
    dec = info["decoding"]
    assert dec["entity_types"] == {"person": "PER", "location": "LOC"} and dec["algorithm"] == "semi-crf"
    assert dec["threshold"] == 0.6 and abs(dec["bias"] - np.log(0.4 / 0.6)) < 1e-12 and dec["temperature"] == 1.0
    assert dec["max_width"] == 4 and dec["max_len"] == 8 and dec["scheme"] == "IOB2"
    reader = CacheReader(str(out))
    assert reader.manifest.label_schema.tags == ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")
    fields = ["span_logits", "kbest_paths", "kbest_log_probs", "log_z", "marginals", "gold_nll"]
    rows = list(reader.iter_examples({"examples": ["words", "tags"], "tiny-gliner": fields}))
    assert len(rows) == 24 + 8 + 11
    bias = dec["bias"]
    for row in rows:
        t = row["tiny-gliner"]
        n = len(row["examples"]["words"])
        logits = torch.as_tensor(np.asarray(t["span_logits"], dtype=np.float64))[None]
        assert logits.shape == (1, n, 4, 2)
        lengths = torch.tensor([n])
        phi = logits + bias
        m = semicrf.marginals(phi, lengths)
        best = semicrf.kbest(phi, lengths, 4)
        assert abs(float(m.log_z[0]) - t["log_z"]) < 2e-2  # the cache's log Z from fp32 scores, these from fp16
        np.testing.assert_allclose(np.asarray(t["marginals"], np.float64), m.tags[0].numpy(), atol=5e-3)
        np.testing.assert_allclose(t["kbest_log_probs"], best.log_probs[0, : len(t["kbest_log_probs"])], atol=2e-2)
        # the cached paths are the semi-CRF's own best paths, tag by tag (tag ids in the schema's order:
        # a type axis out of that order gives other ids)
        valid = int(best.valid[0].sum())
        assert len(t["kbest_paths"]) == valid and {len(p) for p in t["kbest_paths"]} == {n}
        _assert_same_paths(t["kbest_paths"], best.paths[0, :valid, :n].tolist(), best.log_probs[0, :valid].tolist())
        if row["examples"]["tags"] is None:
            assert t["gold_nll"] is None
        else:
            ids = torch.tensor([reader.manifest.label_schema.encode(row["examples"]["tags"])])
            assert abs(t["gold_nll"] - float(m.log_z[0] - semicrf.path_scores(phi, lengths, ids)[0])) < 2e-2
    # the student learns what the teacher says: its tag marginals over the cache's sentences are nearer
    # the teacher's (KL) than those of a student of the same run from the gold tags alone
    words = [row["examples"]["words"] for row in rows]
    teacher = [np.asarray(row["tiny-gliner"]["marginals"], np.float64) for row in rows]
    kl = {}
    for name, losses in (("taught", ("hard", "seq-ce", "fuzzy", "token-pos")), ("gold", ("hard",))):
        cfg = MGKDConfig(losses=losses, k=4, epochs=6, embedding="random", embedding_dim=8, hidden_size=8, device="cpu")
        summary = train_student(str(out), tmp_path / name, cfg, log=lambda *a: None)
        assert summary["steps"] > 0 and (tmp_path / name / "model.safetensors").exists()
        student = _student_marginals(tmp_path / name, words)
        kl[name] = np.mean(
            [(p * (np.log(p + 1e-9) - np.log(q + 1e-9))).sum(-1).mean() for p, q in zip(teacher, student)]
        )
    assert kl["taught"] < 0.5 * kl["gold"], kl
    with pytest.raises(Exception, match="token-em reads logits"):
        train_student(str(out), tmp_path / "x", MGKDConfig(losses=("hard", "token-em"), device="cpu"), log=print)
    assert not (tmp_path / "x" / "model.safetensors").exists()


def _assert_same_paths(cached: list, paths: list, log_probs: list, tie: float = 1e-3) -> None:
    """The cached k-best paths are ``paths`` (the semi-CRF's own, best first), tag by tag and rank by
    rank, except that ranks whose log-probabilities lie within ``tie`` of the next are compared as a
    set: near ties, which the fp16 rounding of the stored logits may order either way."""
    assert len(cached) == len(paths), (cached, paths)
    start = 0
    for r in range(1, len(paths) + 1):
        if r == len(paths) or log_probs[r - 1] - log_probs[r] > tie:
            assert sorted(cached[start:r]) == sorted(paths[start:r]), (start, r, cached, paths)
            start = r


def _student_marginals(d, words: list[list[str]]) -> list[np.ndarray]:
    """A saved student's CRF tag marginals ``[n, T]`` of each sentence (eval mode: no dropout)."""
    from seqdistill import crf
    from seqdistill.students.archs import load_student

    model, tokenizer = load_student(d)
    with torch.no_grad():
        batch = model.inputs(tokenizer, words)
        m = crf.marginals(model(batch), batch.mask, *model.crf.scores()).double().numpy()
    return [m[i, : len(w)] for i, w in enumerate(words)]


def test_a_span_temperature_divides_the_potentials_and_none_at_or_below_zero_is_taken(gliner_dir, tmp_path):
    """--span-temperature T: the manifest records T, and each row's log Z, marginals, k-best paths
    and log-probabilities and gold NLL are the semi-CRF's over phi = (l + b) / T of its stored
    logits, not those at T = 1; T = 0 and T < 0 are refused by name and nothing is written."""
    train = toy_corpus(tmp_path / "train.txt", 4, 0)
    base = ["build", "--teacher", gliner_dir, "--entity-types", TYPES, "--labelled", f"toy={train}@train"]
    base += ["--kbest", "3", "--span-threshold", "0.8", "--device", "cpu"]  # b = log(1/4): T moves phi
    out = tmp_path / "cache"
    r = CliRunner().invoke(cache_cli, [*base, "--out", str(out), "--span-temperature", "2.5"])
    assert r.exit_code == 0, r.output
    reader = CacheReader(str(out))
    dec = reader.manifest.teachers["tiny-gliner"].decoding
    assert dec["temperature"] == 2.5 and dec["threshold"] == 0.8 and abs(dec["bias"] - np.log(0.25)) < 1e-12
    fields = ["span_logits", "kbest_paths", "kbest_log_probs", "log_z", "marginals", "gold_nll"]
    rows = list(reader.iter_examples({"examples": ["words", "tags"], "tiny-gliner": fields}))
    assert len(rows) == 4
    for row in rows:
        t = row["tiny-gliner"]
        n = len(row["examples"]["words"])
        logits = torch.as_tensor(np.asarray(t["span_logits"], dtype=np.float64))[None]
        lengths = torch.tensor([n])
        phi = (logits + dec["bias"]) / 2.5
        m, best = semicrf.marginals(phi, lengths), semicrf.kbest(phi, lengths, 3)
        assert abs(float(m.log_z[0]) - t["log_z"]) < 2e-2
        assert abs(float(semicrf.log_partition(logits + dec["bias"], lengths)[0]) - t["log_z"]) > 0.5  # not T = 1's
        np.testing.assert_allclose(np.asarray(t["marginals"], np.float64), m.tags[0].numpy(), atol=5e-3)
        np.testing.assert_allclose(t["kbest_log_probs"], best.log_probs[0], atol=2e-2)
        valid = int(best.valid[0].sum())
        _assert_same_paths(t["kbest_paths"], best.paths[0, :valid, :n].tolist(), best.log_probs[0, :valid].tolist())
        ids = torch.tensor([reader.manifest.label_schema.encode(row["examples"]["tags"])])
        assert abs(t["gold_nll"] - float(m.log_z[0] - semicrf.path_scores(phi, lengths, ids)[0])) < 2e-2
    for temperature in ("0", "-1"):
        bad = tmp_path / f"cache{temperature}"
        r = CliRunner().invoke(cache_cli, [*base, "--out", str(bad), "--span-temperature", temperature])
        assert r.exit_code == 1, r.output
        assert f"--span-temperature {float(temperature)}: a temperature must be above 0" in r.output
        assert not bad.exists()


@pytest.mark.parametrize(
    "types, message",
    [
        (None, "a GLiNER span model finds the entity types it is asked for: give them"),
        ("", "give them, e.g. --entity-types"),
        ("person=PER,human=PER", "tag 'PER' is given twice"),
        ("person=B-PER", "tag 'B-PER' (for 'person') is not an entity type"),
        ("person=O", "tag 'O'"),
        ("person", "'person' is not NAME=TAG"),
    ],
)
def test_bad_entity_types_are_refused_by_name_and_nothing_is_written(gliner_dir, tmp_path, types, message):
    train = toy_corpus(tmp_path / "train.txt", 4, 0)
    out = tmp_path / "cache"
    args = ["build", "--out", str(out), "--teacher", gliner_dir, "--labelled", f"toy={train}@train", "--device", "cpu"]
    if types is not None:
        args += ["--entity-types", types]
    r = CliRunner().invoke(cache_cli, args)
    assert r.exit_code == 1 and message in r.output, r.output
    assert not out.exists()


def test_entity_types_for_another_kind_and_a_missing_package_are_refused(
    gliner_dir, tiny_encoder, tmp_path, monkeypatch
):
    from seqdistill.cache_schema import LabelSchema
    from seqdistill.teachers import build_teacher

    crf = build_teacher(tiny_encoder, LabelSchema("IOB2", ("LOC", "PER")), "crf").save(tmp_path / "crf")
    train = toy_corpus(tmp_path / "train.txt", 4, 0)
    out = tmp_path / "cache"
    base = ["build", "--out", str(out), "--labelled", f"toy={train}@train", "--device", "cpu", "--entity-types", TYPES]
    r = CliRunner().invoke(cache_cli, [*base, "--teacher", str(crf)])
    assert r.exit_code == 1 and "--entity-types names the types of a span teacher" in r.output
    assert "is a crf teacher" in r.output and not out.exists()
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gliner" else real(name, *a))
    r = CliRunner().invoke(cache_cli, [*base, "--teacher", gliner_dir])
    assert r.exit_code == 1 and "pip install 'seqdistill[gliner]'" in r.output and not out.exists()
    with pytest.raises(TeacherError, match=r"needs the gliner package: pip install"):
        _teacher(gliner_dir)


def test_a_gliner_on_the_hub_with_pickle_weights_builds_offline_by_its_id(gliner_dir, tmp_path):
    """A Hub GLiNER whose weights are pytorch_model.bin (as many are), placed in huggingface_hub's
    cache layout: read offline by its id, through the package's weights-only loader; the same
    scores as the safetensors directory; a missing id is named, nothing written."""
    from gliner import GLiNER

    commit = "0123456789abcdef0123456789abcdef01234567"
    hub = tmp_path / "hub"
    snap = hub / "models--acme--tiny-gliner" / "snapshots" / commit
    GLiNER.from_pretrained(gliner_dir, local_files_only=True).save_pretrained(snap, safe_serialization=False)
    assert (snap / "pytorch_model.bin").exists() and not (snap / "model.safetensors").exists()
    (hub / "models--acme--tiny-gliner" / "refs").mkdir()
    (hub / "models--acme--tiny-gliner" / "refs" / "main").write_text(commit)
    corpus = toy_corpus(tmp_path / "train.txt", 4, 0)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub), "TOKENIZERS_PARALLELISM": "false"}
    exe = Path(sys.executable).parent / "distill-cache"
    common = ["--entity-types", TYPES, "--labelled", f"toy={corpus}@train", "--device", "cpu"]
    run = lambda *a: subprocess.run([str(exe), "build", *a, *common], capture_output=True, text=True, env=env)
    r = run("--out", str(tmp_path / "c"), "--teacher", "acme/tiny-gliner")
    assert r.returncode == 0, r.stdout + r.stderr
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert manifest["teachers"][0]["id"] == "tiny-gliner" and manifest["teachers"][0]["kind"] == "span"
    r = run("--out", str(tmp_path / "d"), "--teacher", str(gliner_dir))
    assert r.returncode == 0, r.stderr
    a = list(CacheReader(str(tmp_path / "c")).iter_examples({"tiny-gliner": ["span_logits"]}))
    b = list(CacheReader(str(tmp_path / "d")).iter_examples({"tiny-gliner": ["span_logits"]}))
    assert len(a) == len(b) == 4  # every sentence of the corpus, in both caches
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x["tiny-gliner"]["span_logits"], y["tiny-gliner"]["span_logits"])
    r = run("--out", str(tmp_path / "e"), "--teacher", "acme/absent-gliner")
    assert r.returncode == 1 and "acme/absent-gliner" in r.stderr and "offline (HF_HUB_OFFLINE=1)" in r.stderr
    assert not (tmp_path / "e").exists()


def test_a_token_level_gliner_writes_a_layer(tiny_encoder, tmp_path):
    """A token-level GLiNER (start, end and inside logits of each word) builds a span layer: each
    stored span logit is the minimum of its first word's start logit, its last word's end logit and
    the inside logits of its words, taken here by hand from the package's own token scores (types
    in the schema's order, -inf past a sentence's end, to fp16's rounding); its marginals sum to 1
    a word; the teacher's fp32 outputs of a one-word sentence are the same minima."""
    d = _gliner(tiny_encoder, tmp_path / "token-gliner", span_mode="token_level")
    teacher = _teacher(d)
    assert teacher.scorer.token_level
    corpus = toy_corpus(tmp_path / "train.txt", 6, 0)
    out = tmp_path / "cache"
    args = ["build", "--out", str(out), "--teacher", d, "--entity-types", TYPES, "--labelled", f"toy={corpus}@train"]
    r = CliRunner().invoke(cache_cli, [*args, "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert verify_cache(str(out)) == []
    fields = {"examples": ["words"], "token-gliner": ["span_logits", "marginals"]}
    rows = list(CacheReader(str(out)).iter_examples(fields))
    assert len(rows) == 6
    words = [row["examples"]["words"] for row in rows]
    for row, want in zip(rows, _min_rule(teacher, words)):
        got = np.asarray(row["token-gliner"]["span_logits"], np.float32)
        assert got.shape == want.shape == (len(row["examples"]["words"]), 4, 2)
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-3)  # -inf where the hand-made value is -inf
        np.testing.assert_allclose(np.asarray(row["token-gliner"]["marginals"], np.float64).sum(-1), 1.0, atol=1e-2)
    words = [["anna", "visits", "rome"], ["peter"]]
    out = teacher.outputs(words, k=3, precision="fp32")
    assert out.logits.shape == (2, 3, 4, 2)
    want = _min_rule(teacher, words)
    torch.testing.assert_close(out.logits[0], torch.from_numpy(want[0]))
    torch.testing.assert_close(out.logits[1, :1], torch.from_numpy(want[1]))
    assert torch.isinf(out.logits[1, 1:]).all()  # past the one-word sentence's end: no span
    torch.testing.assert_close(out.marginals.sum(-1)[0], torch.ones(3))


def _min_rule(teacher, words: list[list[str]]) -> list[np.ndarray]:
    """Each sentence's ``[n, W, C]`` span logits by hand from the package's token-level ``[B, L, C, 3]``
    (start, end, inside) logits of one pass over ``words``: the smallest of the first word's start,
    the last word's end and each word's inside logit; -inf for a span past the end; the schema's
    type order."""
    model = teacher.gliner
    raw = model.run_batch(model.collate_batch(model.prepare_base_input(words), teacher.names)).logits.float()
    names = dict((tag, name) for name, tag in teacher.span.entity_types)
    out = []
    for b, sentence in enumerate(words):
        n = len(sentence)
        want = np.full((n, teacher.span.max_width, len(teacher.schema.entity_types)), -np.inf, np.float32)
        for c, tag in enumerate(teacher.schema.entity_types):
            k = teacher.names.index(names[tag])
            for i in range(n):
                for w in range(min(teacher.span.max_width, n - i)):
                    parts = [raw[b, i, k, 0], raw[b, i + w, k, 1], *raw[b, i : i + w + 1, k, 2]]
                    want[i, w, c] = min(float(x) for x in parts)
        out.append(want)
    return out


def test_the_models_own_greedy_decode_is_the_packages(gliner_dir):
    """SpanScorer.greedy gives the spans the package's own word-level decoding gives (its
    decode_batch with flat_ner=True) for a sentence that fits in one pass."""
    teacher = _teacher(gliner_dir)
    model, words = teacher.gliner, [["anna", "visits", "the", "rome"], ["peter", "visits", "paris", "."]]
    for threshold in (0.5, 0.05):
        batch = model.collate_batch(model.prepare_base_input(words), teacher.names)
        want = model.decode_batch(model.run_batch(batch), batch, threshold=threshold, flat_ner=True)
        got = teacher.scorer.greedy(words, threshold)
        assert got == [sorted((sp.start, sp.end + 1, teacher.names.index(sp.entity_type)) for sp in w) for w in want]
    assert any(got)  # the random head passes 0.05 somewhere: the comparison is not between empty lists


def test_the_prompts_follow_the_entity_types_order_and_the_cache_the_schemas(gliner_dir):
    """The model reads the types in the order --entity-types gives them (a GLiNER trained with one
    order of types reads them by position); the scores' type axis is the schema's (sorted tags)."""
    words = [["anna", "visits", "the", "rome"]]
    for types in ("person=PER,location=LOC", "location=LOC,person=PER"):
        teacher = _teacher(gliner_dir, types)
        assert teacher.names == [n for n, _ in parse_entity_types(types)]
        assert teacher.schema.entity_types == ("LOC", "PER")
        got = teacher.outputs(words, k=2, precision="fp32").logits
        alone = SpanScorer(teacher.gliner, teacher.names).logits(words)
        for c, tag in enumerate(teacher.schema.entity_types):
            name = dict((t, n) for n, t in parse_entity_types(types))[tag]
            torch.testing.assert_close(got[..., c], alone[..., teacher.names.index(name)])
