"""Teachers on tiny random encoders built from a config (no downloads)."""

import json

import pytest
import torch
from click.testing import CliRunner

from seqdistill.cache_schema import LabelSchema
from seqdistill.cache_schema.labels import check_sequence
from seqdistill.crf import log_partition, path_score
from seqdistill.teachers import TeacherError, build_teacher, load_teacher

SCHEMA = LabelSchema("IOB2", ("LOC", "PER"))


def _direct(teacher, ids):
    """The encoder's last hidden state on one window, computed without seqdistill's batching."""
    with torch.no_grad():
        x = torch.tensor([teacher.words.prefix + ids + teacher.words.suffix])
        return teacher.encoder(input_ids=x, attention_mask=torch.ones_like(x)).last_hidden_state[0]


@pytest.mark.parametrize("pooling", ["first", "mean"])
def test_pooling_matches_hand_computation(tiny_encoder, pooling):
    teacher = build_teacher(tiny_encoder, SCHEMA, "softmax", pooling=pooling).eval()
    words = [["Peter", "visits", "Paris"], ["xyz", "eu"]]
    enc = teacher.tokenizer(words, is_split_into_words=True, add_special_tokens=False)
    with torch.no_grad():
        seg = teacher.words(words)
        out = teacher.encoder(input_ids=seg.input_ids, attention_mask=seg.attention_mask).last_hidden_state
        pooled = seg.pool(out)
    for b, sent in enumerate(words):
        ids, wids = enc["input_ids"][b], enc.word_ids(b)
        h = _direct(teacher, ids)[len(teacher.words.prefix) :]
        for w in range(len(sent)):
            pos = [i for i, x in enumerate(wids) if x == w]
            want = h[pos[0]] if pooling == "first" else h[pos].mean(0)
            torch.testing.assert_close(pooled[b, w], want, atol=1e-5, rtol=1e-4)
    assert (pooled[1, 2:] == 0).all()


def test_long_sentences_run_in_windows_and_each_word_takes_its_best_window(tiny_encoder):
    teacher = build_teacher(tiny_encoder, SCHEMA, "crf", max_length=10).eval()  # 8 subwords a window
    sent = ["peter", "visits", "rome", "abc", "paris", "the", "eu", "anna", "visits", "xy", "rome", "peter"]
    seg = teacher.words([sent, ["anna"]])
    assert seg.num_segments_per_sentence[0] > 2 and seg.num_segments_per_sentence[1] == 1
    enc = teacher.tokenizer([sent], is_split_into_words=True, add_special_tokens=False)
    ids, wids = enc["input_ids"][0], enc.word_ids(0)
    # subword outputs: every subword of the sentence exactly once, in order
    n_sub = len(ids)
    assert seg.subword_word_ids[0, :n_sub].tolist() == wids and (seg.subword_word_ids[0, n_sub:] == -1).all()
    with torch.no_grad():
        out = teacher.encoder(input_ids=seg.input_ids, attention_mask=seg.attention_mask).last_hidden_state
        pooled = seg.pool(out)
    p = len(teacher.words.prefix)
    windows = []
    for s in range(seg.num_segments_per_sentence[0]):
        toks = seg.input_ids[s][seg.attention_mask[s].bool()].tolist()[p:-1]
        start = next(i for i in range(len(ids)) if ids[i : i + len(toks)] == toks)
        windows.append((start, start + len(toks)))
    assert windows[0][0] == 0 and windows[-1][1] == len(ids)
    for w in range(len(sent)):
        first = wids.index(w)
        last = len(wids) - wids[::-1].index(w)
        inside = [i for i, (s, e) in enumerate(windows) if s <= first and last <= e]
        best = max(inside, key=lambda i: (min(first - windows[i][0], windows[i][1] - last), -i))
        s, e = windows[best]
        want = _direct(teacher, ids[s:e])[p + first - s]
        torch.testing.assert_close(pooled[0, w], want, atol=1e-5, rtol=1e-4)


def test_crf_teacher_outputs_agree_with_the_crf(tiny_encoder):
    teacher = build_teacher(tiny_encoder, SCHEMA, "crf").eval()
    with torch.no_grad():
        teacher.crf.transitions.normal_()
    words = [["Peter", "visits", "Paris"], ["anna"], ["the", "eu", "rome", "rome"]]
    tags = torch.tensor([[3, 0, 1, -1], [3, -1, -1, -1], [0, 1, 2, 2]])
    out = teacher.outputs(words, tags, k=4, hidden_layers=(0, 2), subwords=True)
    with torch.no_grad():
        trans, start, end = teacher.crf.scores()
        torch.testing.assert_close(out.log_z, log_partition(out.logits, out.word_mask, trans, start, end))
        gold = path_score(out.logits, out.word_mask, tags, trans, start, end)
    torch.testing.assert_close(out.gold_nll, out.log_z - gold)
    torch.testing.assert_close(out.marginals.sum(-1), out.word_mask.float())
    for b, sent in enumerate(words):
        for r in range(4):
            path = out.kbest_paths[b, r, : len(sent)].tolist()
            if torch.isfinite(out.kbest_log_probs[b, r]):
                assert check_sequence(SCHEMA.decode(path), "IOB2") is None
            else:  # a one-word sentence has 3 valid paths: O, B-LOC, B-PER
                assert (b, r, path) == (1, 3, [-1])
    assert (out.kbest_log_probs[:, :-1] >= out.kbest_log_probs[:, 1:]).all()
    assert out.hidden[0].shape == (3, 4, 32) and set(out.hidden) == {0, 2}
    assert out.subword_logits.shape[:2] == out.subword_word_ids.shape
    with pytest.raises(TeacherError, match=r"hidden layer 3 does not exist: the encoder has layers 0..2"):
        teacher.outputs(words, hidden_layers=(3,))


def test_save_and_load_round_trip_with_fingerprints(tiny_encoder, tmp_path):
    teacher = build_teacher(tiny_encoder, SCHEMA, "crf").eval()
    with torch.no_grad():
        teacher.crf.transitions.normal_()
    teacher.save(tmp_path / "t")
    meta = json.loads((tmp_path / "t" / "teacher.json").read_text())
    assert meta["kind"] == "crf" and meta["label_schema"]["tags"] == list(SCHEMA.tags)
    loaded = load_teacher(tmp_path / "t")
    words = [["Peter", "visits", "Paris"]]
    a, b = teacher.outputs(words, k=3), loaded.outputs(words, k=3)
    torch.testing.assert_close(a.logits, b.logits)
    assert torch.equal(a.kbest_paths, b.kbest_paths)
    fp = loaded.fingerprints()
    assert set(fp) == {"weights", "tokenizer"} and all(len(v) == 64 for v in fp.values())
    with torch.no_grad():
        loaded.crf.start.add_(1.0)
    loaded.save(tmp_path / "t")
    fp2 = load_teacher(tmp_path / "t").fingerprints()
    assert fp2["weights"] != fp["weights"] and fp2["tokenizer"] == fp["tokenizer"]


def test_token_classification_checkpoint_becomes_a_softmax_teacher(tiny_encoder, tmp_path):
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]  # another order than the schema's
    model = AutoModelForTokenClassification.from_pretrained(
        tiny_encoder, num_labels=5, id2label=dict(enumerate(labels)), label2id={t: i for i, t in enumerate(labels)}
    )
    model.save_pretrained(tmp_path / "tc")
    AutoTokenizer.from_pretrained(tiny_encoder).save_pretrained(tmp_path / "tc")
    teacher = load_teacher(tmp_path / "tc")
    assert teacher.kind == "softmax" and teacher.schema == SCHEMA
    words = [["Peter", "visits", "Paris"]]
    x = teacher.words(words)
    with torch.no_grad():
        ref = model.eval()(input_ids=x.input_ids, attention_mask=x.attention_mask).logits[0, 1:4]
        got = teacher.outputs(words).logits[0]
    for i, tag in enumerate(labels):
        torch.testing.assert_close(got[:, SCHEMA.tags.index(tag)], ref[:, i], atol=1e-5, rtol=1e-4)


def test_plain_encoder_directory_is_not_a_teacher(tiny_encoder, tmp_path):
    with pytest.raises(TeacherError, match="fine-tune it first"):
        load_teacher(tiny_encoder)
    with pytest.raises(TeacherError, match="no such teacher directory"):
        load_teacher(tmp_path / "missing")


def test_remote_code_only_from_an_explicit_flag(tiny_encoder, tmp_path, monkeypatch):
    import transformers

    seen = []
    real = transformers.AutoModel.from_pretrained

    def spy(*args, **kwargs):
        seen.append(kwargs.get("trust_remote_code"))
        return real(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", spy)
    build_teacher(tiny_encoder, SCHEMA, "crf").save(tmp_path / "t")
    load_teacher(tmp_path / "t")
    assert seen == [False, False]


def _toy_corpus(path, n, seed):
    """Names are PER, cities LOC: learnable from the words alone."""
    import random

    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        name, city = rng.choice(["peter", "anna"]), rng.choice(["paris", "rome"])
        lines += [f"{name} B-PER", "visits O", f"{city} B-LOC", "the O", ""]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_finetune_teacher_command_learns_and_saves_a_loadable_teacher(tiny_encoder, tmp_path):
    from seqdistill.cli.cache import main as cache_cli

    train = _toy_corpus(tmp_path / "train.txt", 48, 0)
    dev = _toy_corpus(tmp_path / "dev.txt", 12, 1)
    r = CliRunner().invoke(
        cache_cli,
        [
            "finetune-teacher",
            "--encoder",
            tiny_encoder,
            "--train",
            str(train),
            "--dev",
            str(dev),
            "--test",
            str(dev),
            "--out",
            str(tmp_path / "teacher"),
            "--epochs",
            "6",
            "--lr",
            "3e-3",
            "--head-lr",
            "3e-2",
            "--batch-size",
            "8",
            "--dropout",
            "0.1",
            "--device",
            "cpu",
        ],
    )
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "teacher" / "training.json").read_text())
    assert summary["best_dev_f1"] > 0.9 and summary["test"]["f1"] == pytest.approx(summary["best_dev_f1"])
    teacher = load_teacher(tmp_path / "teacher")
    assert teacher.predict([["anna", "visits", "rome"]]) == [["B-PER", "O", "B-LOC"]]


def test_layerwise_learning_rates(tiny_encoder):
    from seqdistill.teachers.finetune import FinetuneConfig, layerwise_groups

    teacher = build_teacher(tiny_encoder, SCHEMA, "crf")
    groups = layerwise_groups(teacher, FinetuneConfig(lr=1.0, layer_decay=0.5, head_lr=7.0))
    lrs = sorted(g["lr"] for g in groups)
    assert lrs == [0.25, 0.5, 1.0, 7.0]  # embeddings, block 0, block 1 (+ pooler), head + CRF
    head = next(g for g in groups if g["lr"] == 7.0)
    assert {id(p) for p in head["params"]} == {
        id(p) for n, p in teacher.named_parameters() if not n.startswith("encoder.")
    }


@pytest.mark.parametrize("point", ["train-step:5", "train-step:6", "train-step:13"])
def test_finetune_killed_anywhere_resumes_to_the_same_weights(tiny_encoder, tmp_path, point):
    """Issue 22, item 1: a fine-tune killed mid-epoch (5: a checkpoint at step 4 of epoch 1; 6: the
    epoch's last batch; 13: in epoch 3) continues with the same command and ends with the weights
    of an uninterrupted run; a checkpoint of another run is refused by name."""
    from safetensors.torch import load_file
    from test_reliability import _in_child

    from seqdistill.cache_schema.storage import FAILPOINT_ENV
    from seqdistill.corpora import read_corpus
    from seqdistill.teachers.finetune import FinetuneConfig, finetune

    train = read_corpus(str(_toy_corpus(tmp_path / "train.txt", 40, 0)), "train", "train").sentences
    dev = read_corpus(str(_toy_corpus(tmp_path / "dev.txt", 8, 1)), "dev", "dev").sentences
    cfg = FinetuneConfig(epochs=3, batch_size=8, lr=3e-3, head_lr=3e-2, dropout=0.1, checkpoint_every=4, patience=5)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the killed child runs on one thread: the same arithmetic everywhere
    try:
        full = finetune(tiny_encoder, train, dev, SCHEMA, tmp_path / "full", cfg, device="cpu", log=lambda *a: None)
        out = tmp_path / "killed"
        code = _in_child(
            lambda: finetune(tiny_encoder, train, dev, SCHEMA, out, cfg, device="cpu", log=lambda *a: None),
            {FAILPOINT_ENV: point},
        )
        assert code == -9 and (out / "checkpoint").exists()
        with pytest.raises(ValueError, match=r"checkpoint of another run \(lr was 0.003, now 0.001\)"):
            finetune(
                tiny_encoder,
                train,
                dev,
                SCHEMA,
                out,
                FinetuneConfig(**{**cfg.__dict__, "lr": 1e-3}),
                device="cpu",
                log=lambda *a: None,
            )
        logs = []
        resumed = finetune(tiny_encoder, train, dev, SCHEMA, out, cfg, device="cpu", log=logs.append)
    finally:
        torch.set_num_threads(threads)
    assert any(line.startswith("resuming from") for line in logs), logs
    assert [h["dev_f1"] for h in resumed["history"]] == [h["dev_f1"] for h in full["history"]]
    assert [h["loss"] for h in resumed["history"]] == [h["loss"] for h in full["history"]]
    for name in ("model.safetensors", "head.safetensors"):
        ours, theirs = load_file(str(out / name)), load_file(str(tmp_path / "full" / name))
        assert ours.keys() == theirs.keys()
        assert all(torch.equal(ours[k], theirs[k]) for k in ours), name
    assert not (out / "checkpoint").exists()  # removed when the run ends


def test_a_checkpoint_of_the_old_fine_tuning_loop_is_refused_with_what_to_do(tiny_encoder, tmp_path):
    """Teachers' fine-tuning left its own loop for the one trainer (issue 33): a checkpoint that
    loop wrote is refused by name, before any tensor is read, and --restart is the way on."""
    from seqdistill.checkpoint import save_checkpoint
    from seqdistill.corpora import read_corpus
    from seqdistill.teachers import build_teacher
    from seqdistill.teachers.finetune import FinetuneConfig, finetune

    train = read_corpus(str(_toy_corpus(tmp_path / "train.txt", 8, 0)), "train", "train").sentences
    teacher = build_teacher(tiny_encoder, SCHEMA, "crf")
    optim = torch.optim.AdamW(teacher.parameters())
    old = {"identity": {"config": {}}, "schedule": {}, "position": {"epoch": 0, "done": 4}}
    save_checkpoint(tmp_path / "out", {"teacher0": teacher}, optim, old)
    cfg = FinetuneConfig(epochs=1, batch_size=8)
    with pytest.raises(ValueError, match=r"written by an older fine-tuning loop.*--restart"):
        finetune(tiny_encoder, train, train, SCHEMA, tmp_path / "out", cfg, device="cpu", log=lambda *a: None)
    summary = finetune(
        tiny_encoder, train, train, SCHEMA, tmp_path / "out", FinetuneConfig(epochs=1, batch_size=8, resume=False)
    )
    assert summary["finished"] and not (tmp_path / "out" / "checkpoint").exists()


def test_length_buckets_group_similar_lengths_and_keep_every_sentence_once():
    """--length-buckets: each batch is a run of a pool sorted by length, so a batch's lengths are
    consecutive in its pool's sorted order; every sentence appears once; only the last batch is short;
    the order is a pure function of the seed."""
    import random

    from seqdistill.teachers.finetune import bucketed

    rng = random.Random(0)
    lengths = [rng.randint(1, 60) for _ in range(203)]
    indices = list(range(203))
    rng.shuffle(indices)
    out = bucketed(indices, lengths, batch_size=8, pool=5, seed=3)
    assert sorted(out) == list(range(203)) and out == bucketed(indices, lengths, 8, 5, 3)
    assert out != bucketed(indices, lengths, 8, 5, 4)
    batches = [out[s : s + 8] for s in range(0, len(out), 8)]
    assert [len(b) for b in batches] == [8] * 25 + [3]
    pools = [set(indices[s : s + 40]) for s in range(0, 203, 40)]  # the shuffled indices, 5 batches a pool
    for b in batches:
        holders = [p for p in pools if set(b) <= p]
        assert len(holders) == 1, b  # one pool holds the whole batch
        ls, order = sorted(lengths[i] for i in b), sorted(lengths[i] for i in holders[0])
        assert any(order[j : j + len(ls)] == ls for j in range(len(order) - len(ls) + 1)), (ls, order)
    # padding: the filled share of the batches is higher than that of plain shuffled batches
    fill = lambda bs: sum(sum(lengths[i] for i in b) / (len(b) * max(lengths[i] for i in b)) for b in bs) / len(bs)
    plain = [indices[s : s + 8] for s in range(0, 203, 8)]
    assert fill(batches) > fill(plain) + 0.2


def test_freeze_layers_keeps_embeddings_and_lowest_blocks_fixed(tiny_encoder, tmp_path):
    """--freeze-layers N: the embeddings and blocks 0..N-1 get no gradient and keep their values
    through a fine-tune; the blocks above and the head learn; N past the top block is refused."""
    from seqdistill.corpora import read_corpus
    from seqdistill.teachers.adapters import AdapterError, freeze_lower_layers
    from seqdistill.teachers.finetune import FinetuneConfig, finetune

    teacher = build_teacher(tiny_encoder, SCHEMA, "crf")
    with pytest.raises(
        AdapterError, match=r"--freeze-layers must be between 0 and 1 \(this model has 2 blocks\), not 2"
    ):
        freeze_lower_layers(teacher, 2)
    train = read_corpus(str(_toy_corpus(tmp_path / "train.txt", 16, 0)), "train", "train").sentences
    cfg = FinetuneConfig(epochs=1, batch_size=8, lr=3e-3, freeze_layers=1, length_buckets=2)
    finetune(tiny_encoder, train, train, SCHEMA, tmp_path / "t", cfg, device="cpu", log=lambda *a: None)
    before = dict(build_teacher(tiny_encoder, SCHEMA, "crf").encoder.named_parameters())
    after = dict(load_teacher(tmp_path / "t").encoder.named_parameters())
    kept = {n for n in before if torch.equal(before[n], after[n])}
    assert {n for n in before if "embeddings" in n or ".layer.0." in n} <= kept
    assert any(".layer.1." in n for n in set(before) - kept)


def test_bf16_precision_on_the_cpu(tiny_encoder, tmp_path):
    """precision auto is fp32 on the CPU bit for bit; bf16 autocasts the encoder there and hands the
    CRF fp32 emissions; fp16 on the CPU is refused. Fine-tuning with --precision bf16 learns the
    toy corpus as fp32 does, through a forward pass that really ran in bf16 (other weights)."""
    from seqdistill.corpora import read_corpus
    from seqdistill.teachers.finetune import FinetuneConfig, finetune

    teacher = build_teacher(tiny_encoder, SCHEMA, "crf").eval()
    words = [["Peter", "visits", "Paris"], ["the", "eu", "rome", "rome"]]
    fp32, auto, bf16 = (teacher.outputs(words, k=3, precision=p) for p in ("fp32", "auto", "bf16"))
    assert torch.equal(fp32.logits, auto.logits) and torch.equal(fp32.kbest_paths, auto.kbest_paths)
    assert bf16.logits.dtype == torch.float32 and not torch.equal(fp32.logits, bf16.logits)
    torch.testing.assert_close(bf16.logits, fp32.logits, atol=0.05, rtol=0.05)
    trans, start, end = teacher.crf.scores()
    with torch.no_grad():
        torch.testing.assert_close(bf16.log_z, log_partition(bf16.logits, bf16.word_mask, trans, start, end))
    with pytest.raises(TeacherError, match="precision fp16 runs on a GPU only"):
        teacher.outputs(words, precision="fp16")

    train = read_corpus(str(_toy_corpus(tmp_path / "train.txt", 48, 0)), "train", "train").sentences
    dev = read_corpus(str(_toy_corpus(tmp_path / "dev.txt", 12, 1)), "dev", "dev").sentences
    runs = {}
    for p in ("fp32", "bf16"):
        cfg = FinetuneConfig(epochs=6, batch_size=8, lr=3e-3, head_lr=3e-2, dropout=0.1, precision=p)
        runs[p] = finetune(tiny_encoder, train, dev, SCHEMA, tmp_path / p, cfg, device="cpu", log=lambda *a: None)
    assert runs["bf16"]["best_dev_f1"] > 0.9 and runs["fp32"]["best_dev_f1"] > 0.9
    a, b = (load_teacher(tmp_path / p).classifier.weight for p in ("fp32", "bf16"))
    assert not torch.equal(a, b)
    assert load_teacher(tmp_path / "bf16").predict([["anna", "visits", "rome"]]) == [["B-PER", "O", "B-LOC"]]
