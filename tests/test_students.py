"""Stage two: streaming from a cache, the BiLSTM-CRF student, MGKD training without a teacher."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from conftest import toy_cache
from torch.utils.data import DataLoader

from seqdistill.cache_schema import CacheReader, LabelSchema
from seqdistill.students.archs import load_student
from seqdistill.students.common import predict_tags
from seqdistill.students.data import CacheStream, StreamConfig, parse_selection
from seqdistill.students.recipes import train as train_student
from seqdistill.students.recipes.mgkd import MGKDConfig as TrainConfig

SCHEMA = LabelSchema("IOB2", ("LOC", "PER"))


@pytest.fixture(scope="module")
def cache(tiny_encoder, tmp_path_factory):
    """A cache over toy train/dev/unlabelled corpora whose teacher directory no longer exists."""
    return toy_cache(tiny_encoder, tmp_path_factory.mktemp("stage2"), k=4, shard_size=16)


class _Ids:
    def __init__(self, rows):
        self.ids = [r["example_id"] for r in rows]
        self.lengths = [r["examples"]["n_words"] for r in rows]


def _stream(reader, select=("toy/train", "raw"), **kw):
    cfg = StreamConfig(**{"batch_size": 8, "buffer_size": 32, "seed": 5, **kw})
    return CacheStream(reader, {"examples": ["words"]}, parse_selection(list(select), reader), _Ids, cfg)


def test_stream_visits_each_selected_example_once_in_a_seeded_order(cache):
    reader = CacheReader(cache)
    stream = _stream(reader)
    epoch0 = [b.ids for b in stream]
    flat = [i for b in epoch0 for i in b]
    assert len(flat) == len(set(flat)) == 100
    assert all(i.startswith(("toy/train/", "raw/unlabelled/")) for i in flat)
    assert [b.ids for b in stream] == epoch0  # same (seed, epoch): same batches
    stream.set_epoch(1)
    epoch1 = [b.ids for b in stream]
    assert epoch1 != epoch0 and sorted(i for b in epoch1 for i in b) == sorted(flat)
    # bucketing: within a batch, lengths differ little (the buffer is sorted by length)
    spreads = [max(b.lengths) - min(b.lengths) for b in stream]
    assert sum(spreads) / len(spreads) <= 2


def test_stream_partitions_across_ranks_and_workers(cache):
    reader = CacheReader(cache)
    parts = [
        CacheStream(
            reader,
            {"examples": ["words"]},
            parse_selection(["toy/train", "raw"], reader),
            _Ids,
            StreamConfig(8, 32, 5),
            rank=r,
            world_size=2,
        )
        for r in range(2)
    ]
    seen = [[i for b in p for i in b.ids] for p in parts]
    assert not set(seen[0]) & set(seen[1]) and len(seen[0]) + len(seen[1]) == 100
    loader = DataLoader(_stream(reader), batch_size=None, num_workers=2)
    ids = [i for b in loader for i in b.ids]
    assert sorted(ids) == sorted(seen[0] + seen[1])


def test_stream_resumes_mid_epoch_without_repeating_an_example(cache):
    reader = CacheReader(cache)
    stream = _stream(reader)
    stream.set_epoch(3)
    full = [b.ids for b in stream]
    consumed = {}
    seen = []
    for n, b in enumerate(stream):
        if n == 5:
            break
        consumed[b.origin[0]] = b.origin[1] + 1
        seen += b.ids
    resumed = _stream(reader)
    resumed.set_epoch(3)
    resumed.skip(consumed)
    rest = [i for b in resumed for i in b.ids]
    assert not set(seen) & set(rest) and seen + rest == [i for b in full for i in b]


def test_stream_reads_only_the_fields_asked_for(cache, monkeypatch):
    reader = CacheReader(cache)
    asked = []
    real = reader.read_shard
    monkeypatch.setattr(reader, "read_shard", lambda i, f: asked.append(f) or real(i, f))
    list(_stream(reader))
    assert all(set(f) == {"examples"} for f in asked)
    assert all(set(f["examples"]) == {"corpus", "split", "n_words", "words"} for f in asked)


def test_training_never_imports_the_teachers_package():
    code = (
        "import sys, seqdistill.cli.train, seqdistill.students.recipes; seqdistill.students.recipes.recipes(); "
        "bad = [m for m in sys.modules if m.startswith('seqdistill.teachers') or m == 'seqdistill.pipeline.build']; "
        "assert not bad, bad"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_mgkd_student_learns_from_a_cache_whose_teacher_is_gone(cache, tmp_path):
    from seqdistill.cli.train import main as train_cli

    r = CliRunner().invoke(
        train_cli,
        [
            "--cache",
            cache,
            "--out",
            str(tmp_path / "s"),
            "--losses",
            "hard,seq-ce,fuzzy",
            "--weighting",
            "uncertainty",
            "--k",
            "3",
            "--embedding",
            "random",
            "--embedding-dim",
            "16",
            "--hidden-size",
            "16",
            "--epochs",
            "12",
            "--lr",
            "0.02",
            "--batch-size",
            "8",
            "--dropout",
            "0.1",
            "--device",
            "cpu",
        ],
    )
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "s" / "training.json").read_text())
    assert summary["train"] == ["toy/train", "raw/unlabelled"] and summary["dev"] == ["toy/dev"]
    assert summary["best_dev_f1"] > 0.9
    lines = (tmp_path / "s" / "metrics.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert {"loss_hard", "loss_seq-ce", "loss_fuzzy", "dev_f1", "weights"} <= set(first)
    # the loaded student tags the dev sentences as well as training measured (the teacher is random,
    # so its labels on the unlabelled rows are noise: one sentence's tags are not a stable check)
    from seqdistill.corpora import read_corpus
    from seqdistill.metrics import span_scores

    model, tok = load_student(tmp_path / "s")
    dev = read_corpus(str(Path(cache).parent / "dev.txt"), "toy", "dev").sentences
    pred = predict_tags(model, tok, [s.words for s in dev])
    assert span_scores([s.tags for s in dev], pred, "IOB2")["f1"] == pytest.approx(summary["best_dev_f1"])
    from seqdistill.cli.evaluate import eval_main

    (tmp_path / "test.txt").write_text("peter B-PER\nvisits O\nparis B-LOC\n\n")
    r = CliRunner().invoke(eval_main, ["--model", str(tmp_path / "s"), "--data", str(tmp_path / "test.txt")])
    assert r.exit_code == 0, r.output
    assert "| student | " in r.output and "| 100.00 | 100.00 | 100.00 |" in r.output
    # --predictions keeps the tags on disk and reads them back on a second run
    args = ["--model", str(tmp_path / "s"), "--data", str(tmp_path / "test.txt"), "--no-latency", "--json"]
    for _ in range(2):
        r = CliRunner().invoke(eval_main, [*args, "--predictions", str(tmp_path / "pred")])
        assert r.exit_code == 0, r.output
        row = json.loads(r.output)[0]
        assert row["f1"] == 1.0 and row["predictions"].endswith("_s.jsonl")
    lines = open(row["predictions"]).read().splitlines()
    assert len(lines) == 2 and json.loads(lines[1]) == {"tags": ["B-PER", "O", "B-LOC"]}


def test_eval_comparison_says_factors_of_at_least_one():
    from seqdistill.deploy.evaluate import format_results

    def row(name, params, b1, b32, f1):
        return {
            "model": name,
            "kind": "student",
            "params": params,
            "params_without_embeddings": params,
            "precision": f1,
            "recall": f1,
            "f1": f1,
            "macro_f1": f1,
            "exact_match": 0.0,
            "per_type": {},
            "ms_per_sentence_batch1": b1,
            "ms_per_sentence_batch32": b32,
        }

    text = format_results(
        [row("base", 100, 10.0, 4.0, 0.9), row("small", 25, 2.0, 8.0, 0.8), row("big", 400, 40.0, 1.0, 0.95)]
    )
    assert "small vs base: 4.0x fewer parameters, 5.0x faster at batch 1, 2.0x slower at batch 32, F1 -10.00" in text
    assert "big vs base: 4.0x more parameters, 4.0x slower at batch 1, 4.0x faster at batch 32, F1 +5.00" in text


def test_teacher_embeddings_frozen_and_svd(cache, tmp_path):
    summary = train_student(
        cache,
        tmp_path / "te",
        TrainConfig(losses=("hard", "token-pos"), epochs=1, max_steps=2, device="cpu", hidden_size=8),
        log=lambda *a: None,
    )
    model, _ = load_student(tmp_path / "te")
    from safetensors.numpy import load

    reader = CacheReader(cache)
    export = load(reader.read_export("tiny", "embeddings.safetensors"))
    # the tiny teacher's whole matrix (vocabulary.py: every row of a small one), ids are rows; the
    # trimmed case (kept rows, then the UNK row) is tests/test_vocabulary.py's
    weight = torch.from_numpy(export["weight"])
    assert "ids" not in export and not model.vocab.trimmed
    assert torch.equal(model.embed.weight, weight)  # TE: frozen
    assert summary["steps"] == 2
    train_student(
        cache,
        tmp_path / "svd",
        TrainConfig(embedding="svd", embedding_dim=4, k=3, epochs=1, max_steps=1, device="cpu", hidden_size=8),
        log=lambda *a: None,
    )
    small, _ = load_student(tmp_path / "svd")
    assert small.embed.weight.shape == (weight.shape[0], 4)


def test_clear_errors_for_impossible_requests(cache, tmp_path):
    with pytest.raises(Exception, match=r"--k 9 is more than the 4 paths"):
        train_student(cache, tmp_path / "x", TrainConfig(k=9, device="cpu"), log=lambda *a: None)
    with pytest.raises(Exception, match=r"no teacher 'big'; it holds: tiny"):
        train_student(cache, tmp_path / "x", TrainConfig(teacher="big", k=3, device="cpu"), log=lambda *a: None)
    with pytest.raises(Exception, match=r"no corpus 'wiki'; it holds: toy/train, toy/dev, raw/unlabelled"):
        train_student(cache, tmp_path / "x", TrainConfig(train=("wiki",), k=3, device="cpu"), log=lambda *a: None)


def test_training_resumes_mid_epoch_from_its_checkpoint(cache, tmp_path, monkeypatch):
    import seqdistill.students.recipes.mgkd as T

    seen = []
    real = T.loss_parts
    monkeypatch.setattr(
        T, "loss_parts", lambda model, batch, cfg, dev: seen.append(batch.origin) or real(model, batch, cfg, dev)
    )
    cfg = dict(
        losses=("hard",),
        epochs=1,
        device="cpu",
        hidden_size=8,
        embedding="random",
        embedding_dim=8,
        batch_size=8,
        checkpoint_every=2,
    )
    train_student(cache, tmp_path / "r", TrainConfig(max_steps=5, **cfg), log=lambda *a: None)
    first, seen[:] = list(seen), []
    state = json.loads((tmp_path / "r" / "checkpoint" / "state.json").read_text())["state"]["position"]
    assert (state["epoch"], state["step"]) == (0, 5)
    summary = train_student(cache, tmp_path / "r", TrainConfig(resume=True, **cfg), log=lambda *a: None)
    second = list(seen)
    full = train_student(cache, tmp_path / "full", TrainConfig(**cfg), log=lambda *a: None)
    assert not set(first) & set(second)
    assert summary["steps"] == full["steps"] == len(first) + len(second)


def test_mgkd_resumes_bit_identical_and_trains_under_torchrun(cache, tmp_path):
    from conftest import resumes_and_runs_under_torchrun

    resumes_and_runs_under_torchrun(
        "mgkd",
        cache,
        {
            "losses": "hard,seq-ce",
            "k": 2,
            "epochs": 2,
            "patience": 5,
            "embedding": "random",
            "embedding-dim": 8,
            "hidden-size": 8,
            "batch-size": 8,
            "checkpoint-every": 3,
        },
        tmp_path,
        kill_at=17,
    )


def test_char_feature_sees_case_and_ignores_padding():
    """Issue 22: the char CNN (Ma & Hovy) over each word's bytes: max-pooled over the real bytes
    only, so a word's feature does not depend on the longest word of its batch; case changes it."""
    from seqdistill.students.archs.bilstm_crf import BiLSTMCRF, BiLSTMCRFConfig
    from seqdistill.tokenization import word_bytes

    ids = word_bytes([["Paris", "é"], ["a"]])
    assert ids.shape == (2, 2, 5)
    assert ids[0, 0].tolist() == [b + 1 for b in b"Paris"] and ids[0, 1].tolist() == [0xC3 + 1, 0xA9 + 1, 0, 0, 0]
    assert ids[1, 1].tolist() == [0] * 5  # a padding word
    torch.manual_seed(0)
    cfg = BiLSTMCRFConfig(SCHEMA.to_json(), 10, 4, "random", hidden_size=4, char_dim=3, char_filters=5)
    model = BiLSTMCRF(cfg).eval()
    alone = model.char_feature(word_bytes([["Paris"]]))[0, 0]
    batched = model.char_feature(word_bytes([["Paris", "Internationalisation"]]))[0, 0]
    torch.testing.assert_close(alone, batched)
    assert not torch.allclose(alone, model.char_feature(word_bytes([["paris"]]))[0, 0])
    # by hand: embed, convolve (width 3, zero padding at the word's edges), max over the 5 bytes
    e = model.char_embed(ids[0, 0]).T.unsqueeze(0)  # [1, 3, 5]
    h = torch.nn.functional.conv1d(e, model.char_conv.weight, model.char_conv.bias, padding=1)[0]
    torch.testing.assert_close(alone, h.max(-1).values)
    assert torch.equal(model.char_feature(ids)[1, 1], torch.zeros(5))


def test_word_bytes_scatter_matches_each_word_written_alone():
    """Issue 64: word_bytes scatters every byte at once; each word's row is its UTF-8 bytes plus one,
    cut at max_bytes, zero after them, on padding words and for an empty sentence."""
    from seqdistill.tokenization import word_bytes

    batch = [["Paris", "\x00a", "日本語", "x" * 30], [], ["😀"], ["b"]]
    got = word_bytes(batch, max_bytes=20)
    assert got.shape == (4, 4, 20) and got.dtype == torch.long
    for i, sent in enumerate(batch):
        for j in range(4):
            want = [b + 1 for b in sent[j].encode("utf-8")[:20]] if j < len(sent) else []
            assert got[i, j].tolist() == want + [0] * (20 - len(want))


def test_mgkd_student_with_chars_learns_and_exports(cache, tmp_path):
    from seqdistill.deploy.export import export_model
    from seqdistill.inference import Tagger

    summary = train_student(
        cache,
        tmp_path / "c",
        TrainConfig(
            chars=True,
            losses=("hard",),
            epochs=12,
            lr=0.02,
            embedding="random",
            embedding_dim=8,
            hidden_size=8,
            batch_size=8,
            dropout=0.1,
            device="cpu",
        ),
        log=lambda *a: None,
    )
    assert summary["best_dev_f1"] > 0.9
    model, tok = load_student(tmp_path / "c")
    assert model.config.char_filters == 30 and model.inputs(tok, [["Anna"]]).char_ids is not None
    out = export_model(tmp_path / "c", tmp_path / "onnx")
    sents = [["anna", "visits", "the", "rome"], ["Peter", "visits", "PARIS"]]
    assert Tagger.load(out).predict(sents) == Tagger.load(tmp_path / "c").predict(sents)


def test_each_architecture_saves_its_own_settings_and_old_configs_still_load(tmp_path, tiny_encoder):
    """Issue 56: one config class per architecture. A BiLSTM-CRF's config.json holds its char
    settings and no tagger's or transformer's; a config.json written before (every architecture's
    fields) loads the same model; a field no architecture has is refused, naming it."""
    from transformers import AutoTokenizer

    from seqdistill.students.archs.bilstm_crf import BiLSTMCRF, BiLSTMCRFConfig
    from seqdistill.students.base import SHARED_BEFORE, save_student

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(tiny_encoder)
    config = BiLSTMCRFConfig(SCHEMA.to_json(), len(tok), 8, "random", hidden_size=4, char_dim=3, char_filters=5)
    d = save_student(BiLSTMCRF(config).eval(), tok, tmp_path / "s")
    saved = json.loads((d / "config.json").read_text())
    assert saved["char_filters"] == 5 and not set(saved) & {"projection_dim", "pooling", "head", "encoder_config"}
    words = [["peter", "visits", "rome"]]
    want = predict_tags(*load_student(d), words)
    old = {**saved, "projection_dim": 0, "pooling": "first", "head": "crf", "encoder_config": {}}
    assert set(old) - set(saved) <= set(SHARED_BEFORE)
    (d / "config.json").write_text(json.dumps(old))
    loaded, tok = load_student(d)
    assert isinstance(loaded.config, BiLSTMCRFConfig) and loaded.config.char_dim == 3
    assert predict_tags(loaded, tok, words) == want
    (d / "config.json").write_text(json.dumps({**saved, "hiden_size": 4}))
    with pytest.raises(ValueError, match=r"fields \['hiden_size'\] are not settings of a 'bilstm-crf' student"):
        load_student(d)


def test_mgkd_reads_one_teachers_table_under_another_teachers_paths(tiny_encoder, tmp_path, monkeypatch):
    """--embeddings-teacher: the paths of one teacher layer, the input table and tokenizer of another
    (issue 72: a cased teacher whose tokenizer is too big to ship, over a small teacher's table). The
    two teachers have other tokenizers (the same words, other ids) and other best paths; every
    batch's targets (k-best paths and log-probabilities, and the best path as the hard tags of an
    unlabelled row) are the named teacher's, and the student keeps the table and tokenizer of the
    one --embeddings-teacher names (without it: of the paths' teacher)."""
    import shutil

    from safetensors.numpy import load
    from transformers import AutoTokenizer, BertModel, BertTokenizer

    from seqdistill.pipeline.build import BuildConfig, CorpusSpec, build_cache
    from seqdistill.students.recipes import mgkd
    from seqdistill.teachers import build_teacher

    cache = toy_cache(tiny_encoder, tmp_path, k=4, shard_size=16)
    other = tmp_path / "other-encoder"  # another tokenizer (the words' ids in reverse order) and other weights
    shutil.copytree(tiny_encoder, other)
    ids = AutoTokenizer.from_pretrained(tiny_encoder).get_vocab()
    order = sorted(ids, key=ids.get)
    order = order[:5] + order[5:][::-1]  # [PAD] [UNK] [CLS] [SEP] [MASK] first, as in the tiny vocabulary
    BertTokenizer(vocab={w: i for i, w in enumerate(order)}, do_lower_case=True).save_pretrained(other)
    torch.manual_seed(1)
    BertModel(BertModel.from_pretrained(tiny_encoder).config).save_pretrained(other)
    build_teacher(str(other), SCHEMA, "crf").save(tmp_path / "other-teacher")
    specs = [
        CorpusSpec("toy", str(tmp_path / "train.txt"), "train", True),
        CorpusSpec("toy", str(tmp_path / "dev.txt"), "dev", True),
        CorpusSpec("raw", str(tmp_path / "raw.txt"), "unlabelled", False),
    ]
    cfg = BuildConfig(device="cpu", k=4, shard_size=16)
    build_cache(cache, str(tmp_path / "other-teacher"), specs, cfg, teacher_id="other", log=lambda *a: None)
    reader = CacheReader(cache)
    tables = {
        t: torch.from_numpy(load(reader.read_export(t, "embeddings.safetensors"))["weight"]) for t in ("tiny", "other")
    }
    assert not torch.equal(tables["tiny"], tables["other"])
    vocabs = {t: AutoTokenizer.from_pretrained(Path(reader.export_dir(t)) / "tokenizer").get_vocab() for t in tables}
    assert vocabs["tiny"] != vocabs["other"] and set(vocabs["tiny"]) == set(vocabs["other"])
    layers = {t: {} for t in tables}  # (words, labelled) -> the layer's first 3 paths and their log-probabilities
    fields = {"examples": ["words", "tags"], **{t: ["kbest_paths", "kbest_log_probs"] for t in tables}}
    for row in reader.iter_examples(fields):
        key = (tuple(row["examples"]["words"]), row["examples"]["tags"] is not None)
        for t in tables:
            paths, log_probs = row[t]["kbest_paths"][:3], row[t]["kbest_log_probs"][:3]
            assert layers[t].setdefault(key, (paths, log_probs))[0] == paths  # a sentence met twice: the same paths
    differ = [key for key in layers["tiny"] if layers["tiny"][key][0][0] != layers["other"][key][0][0]]
    assert len(differ) > len(layers["tiny"]) // 4, (len(differ), len(layers["tiny"]))  # other best paths

    batches = []
    real = mgkd.loss_parts

    def spy(model, batch, cfg, device):  # every batch the losses read
        batches.append(batch)
        return real(model, batch, cfg, device)

    monkeypatch.setattr(mgkd, "loss_parts", spy)

    def student(name, **kw):
        batches.clear()
        run = TrainConfig(teacher="other", k=3, epochs=1, max_steps=2, device="cpu", **kw)
        train_student(cache, tmp_path / name, run, log=lambda *a: None)
        assert len(batches) == 2
        for batch in batches:  # the targets are the named teacher's, row by row
            target = batch.teachers[0]
            for b, (words, gold) in enumerate(zip(batch.texts, batch.gold)):
                paths, log_probs = layers["other"][(tuple(words), gold is not None)]
                n, k = len(words), len(paths)
                assert target.kbest_paths[b, :k, :n].tolist() == paths and (target.kbest_paths[b, k:] == -1).all()
                torch.testing.assert_close(target.kbest_log_probs[b, :k], torch.tensor(log_probs), atol=1e-4, rtol=0)
                assert target.tags[b, :n].tolist() == (paths[0] if gold is None else SCHEMA.encode(gold))
        model, tokenizer = load_student(tmp_path / name)
        return model, tokenizer.get_vocab(), json.loads((tmp_path / name / "config.json").read_text())["extra"]

    mixed, vocab, extra = student("mixed", embeddings_teacher="tiny")
    assert torch.equal(mixed.embed.weight, tables["tiny"]) and vocab == vocabs["tiny"]
    assert extra["teacher"] == "other" and extra["embeddings_teacher"] == "tiny"
    own, vocab, extra = student("own")
    assert torch.equal(own.embed.weight, tables["other"]) and vocab == vocabs["other"]
    assert "embeddings_teacher" not in extra
    with pytest.raises(Exception, match=r"no teacher 'big'; it holds: tiny, other"):
        student("bad", embeddings_teacher="big")
