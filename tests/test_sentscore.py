"""SenTScore (paper 004): the SenT' format, and batched tag-wise beam search checked against one
candidate at a time and against brute-force enumeration on a tiny random model."""

import itertools
import json
import math
import random

import pytest
import torch

from seqdistill.teachers.sentscore_search import SentFormat, sbio_tags, sentscore, sentscore_one_at_a_time

WORDS = ["the", "eu", "peter", "paris", "rome", "anna", "visits"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import BertTokenizer

    d = tmp_path_factory.mktemp("sent-tok")
    chars = "abcdefghijklmnopqrstuvwxyz"
    vocab = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        *(f"[unused{i}]" for i in range(12)),
        *chars,
        *("##" + c for c in chars),
        *WORDS,
        "loc",
    ]
    BertTokenizer(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True).save_pretrained(d)
    return BertTokenizer.from_pretrained(d)


def _t5(vocab_size):
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    cfg = T5Config(
        vocab_size=vocab_size,
        d_model=16,
        d_ff=32,
        d_kv=8,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=2,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=3,
        dropout_rate=0.0,
    )
    return T5ForConditionalGeneration(cfg).eval()


def _bert2bert(vocab_size):
    from transformers import BertConfig, EncoderDecoderConfig, EncoderDecoderModel

    torch.manual_seed(0)
    kw = dict(
        vocab_size=vocab_size,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    cfg = EncoderDecoderConfig.from_encoder_decoder_configs(BertConfig(**kw), BertConfig(**kw))
    cfg.decoder_start_token_id, cfg.pad_token_id = 2, 0
    return EncoderDecoderModel(cfg).eval()


def _sentences(n, seed):
    rng = random.Random(seed)
    return [[rng.choice(WORDS) for _ in range(rng.randint(1, 6))] for _ in range(n)]


def test_sent_prime_format(tokenizer):
    fmt = SentFormat(tokenizer, sbio_tags(["LOC", "PER"]))
    assert fmt.tags == ("O", "I", "LOC", "PER") and fmt.max_words == 11
    s = tokenizer.convert_tokens_to_ids
    assert fmt.encode_input(["anna", "visits"]) == [
        s("[CLS]"),
        s("[unused0]"),
        s("anna"),
        s("[unused1]"),
        s("visits"),
        s("[unused2]"),
        s("[SEP]"),
    ]
    per = tokenizer("PER", add_special_tokens=False)["input_ids"]
    assert len(per) == 3  # p ##e ##r: tags of several tokens are scored whole
    assert fmt.encode_target(["PER", "O"]) == [s("[unused0]"), *per, s("[unused1]"), s("o"), s("[unused2]"), s("[SEP]")]
    with pytest.raises(ValueError, match="12 words; SenT' needs 1 to 11"):
        fmt.encode_input(["the"] * 12)
    with pytest.raises(ValueError, match="tag 'B-PER' is not in the sBIO tag set"):
        fmt.encode_target(["B-PER"])


@pytest.mark.parametrize("make", [_t5, _bert2bert], ids=["t5", "bert2bert"])
def test_greedy_sentscore_equals_one_candidate_at_a_time(tokenizer, make):
    model = make(len(tokenizer))
    fmt = SentFormat(tokenizer, sbio_tags(["LOC", "PER"]))
    sents = _sentences(6, 1)
    out = sentscore(model, fmt, sents, k=1)
    for b, words in enumerate(sents):
        tags, scores = sentscore_one_at_a_time(model, fmt, words)
        assert out.tags[b, 0, : len(words)].tolist() == tags
        assert (out.tags[b, 0, len(words) :] == -1).all()
        torch.testing.assert_close(out.tag_scores[b, 0, : len(words)], torch.tensor(scores), atol=1e-4, rtol=1e-4)
        assert out.beam_scores[b, 0].item() == pytest.approx(sum(s[t] for s, t in zip(scores, tags)), abs=1e-3)
        decoded = [fmt.tags[t] for t in tags]
        assert decoded[0] != "I" and all(not (a == "O" and c == "I") for a, c in zip(decoded, decoded[1:]))


def test_sentscore_teacher_precision(tokenizer):
    """``outputs`` takes the build's precision like every teacher: auto is fp32 on the CPU (the
    same scores bit for bit), and a precision that does not exist is refused."""
    from seqdistill.cache_schema import LabelSchema
    from seqdistill.teachers import TeacherError
    from seqdistill.teachers.kinds.sentscore import SentScoreTeacher

    teacher = SentScoreTeacher(_bert2bert(len(tokenizer)), tokenizer, LabelSchema("sBIO", ("LOC", "PER")))
    words = _sentences(5, seed=3)
    fp32, auto = (teacher.outputs(words, precision=p) for p in ("fp32", "auto"))
    assert torch.equal(fp32.kbest_paths, auto.kbest_paths) and torch.equal(fp32.logits, auto.logits)
    assert fp32.logits.dtype == torch.float32
    with pytest.raises(TeacherError, match="fp8"):
        teacher.outputs(words, precision="fp8")


@pytest.mark.parametrize("make", [_t5, _bert2bert], ids=["t5", "bert2bert"])
def test_sentscore_teacher_in_bf16_on_the_cpu(tokenizer, make):
    """``--precision bf16`` asked for by name on the CPU: the model runs under bf16 autocast (its tag
    scores move from fp32's, by less than bf16's rounding allows, and give the same best paths); what
    it returns is fp32: each best beam's score is the fp32 sum of its words' tag scores, not a bf16
    value, and the gold NLL is finite and near fp32's."""
    from seqdistill.cache_schema import LabelSchema
    from seqdistill.teachers.kinds.sentscore import SentScoreTeacher

    schema = LabelSchema("sBIO", ("LOC", "PER"))
    teacher = SentScoreTeacher(make(len(tokenizer)), tokenizer, schema)
    words = _sentences(5, seed=3)
    gold = torch.full((5, max(map(len, words))), -1)
    for b, w in enumerate(words):
        gold[b, : len(w)] = torch.tensor(schema.encode(["PER"] + ["O"] * (len(w) - 1)))
    fp32, bf16 = (teacher.outputs(words, gold, k=3, precision=p) for p in ("fp32", "bf16"))
    for field in ("logits", "kbest_log_probs", "gold_nll"):
        assert getattr(bf16, field).dtype == torch.float32, field
    finite = torch.isfinite(fp32.logits)
    assert torch.equal(finite, torch.isfinite(bf16.logits))
    assert not torch.equal(bf16.logits, fp32.logits)  # the forward pass did run in bf16
    torch.testing.assert_close(bf16.logits[finite], fp32.logits[finite], atol=0.1, rtol=0)
    assert torch.equal(bf16.kbest_paths[:, 0], fp32.kbest_paths[:, 0])
    best = bf16.kbest_paths[:, 0]
    scores = bf16.logits.gather(2, best.clamp(min=0)[..., None])[..., 0]
    summed = torch.where(best >= 0, scores, torch.zeros_like(scores)).sum(1)
    torch.testing.assert_close(bf16.kbest_log_probs[:, 0], summed, atol=1e-5, rtol=0)
    values = bf16.kbest_log_probs[torch.isfinite(bf16.kbest_log_probs)]
    assert not torch.equal(values, values.bfloat16().float())  # summed in fp32, not bf16 values
    assert torch.isfinite(bf16.gold_nll).all()
    torch.testing.assert_close(bf16.gold_nll, fp32.gold_nll, atol=0.1, rtol=0)


def _sequence_log_likelihood(model, fmt, words, tags):
    """log L(s_0 t_1 s_1 ... t_L s_L ; S_in) by one teacher-forced decoder pass."""
    from seqdistill.teachers.sentscore_search import _decoder_start, encode_batch

    enc_ids, enc_mask = encode_batch(fmt, [words], "cpu")
    target = fmt.encode_target(tags)[:-1]  # without the end-of-sequence token
    ids = torch.tensor([[_decoder_start(model)] + target])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=enc_ids, attention_mask=enc_mask, decoder_input_ids=ids).logits, -1)[0]
    return sum(logp[j, tok].item() for j, tok in enumerate(target[1:], start=1))


def test_wide_beam_is_exact_against_brute_force(tokenizer):
    model = _t5(len(tokenizer))
    fmt = SentFormat(tokenizer, sbio_tags(["LOC", "PER"]))
    sents = [["anna", "visits"], ["rome"]]
    K = 16  # at least every valid 2-tag sequence: the beam search is then exact
    out = sentscore(model, fmt, sents, k=K)
    for b, words in enumerate(sents):
        every = []
        for seq in itertools.product(fmt.tags, repeat=len(words)):
            if seq[0] == "I" or any(a == "O" and c == "I" for a, c in zip(seq, seq[1:])):
                continue
            every.append((_sequence_log_likelihood(model, fmt, words, list(seq)), seq))
        every.sort(reverse=True)
        n = len(every)  # 4 x 4 - 0 ... the valid ones only
        got = [
            (out.beam_scores[b, j].item(), tuple(fmt.tags[t] for t in out.tags[b, j, : len(words)].tolist()))
            for j in range(min(K, n))
        ]
        assert [s for _, s in got] == [s for _, s in every[: len(got)]]
        for (g, _), (e, _) in zip(got, every):
            assert g == pytest.approx(e, abs=1e-3)
        assert torch.isinf(out.beam_scores[b, n:]).all()  # beams beyond the valid sequences do not exist


# -- the teacher: fine-tuning on SenT' targets, and the cache it builds ------------------------

CONLL = "".join(
    f"{a} B-PER\nvisits O\n{c} B-LOC\n\n"
    for a, c in [("anna", "paris"), ("peter", "rome"), ("anna", "rome"), ("peter", "paris")] * 4
)


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory, tokenizer):
    """A tiny random BERT with [unusedN] tokens: warm-started as encoder and decoder."""
    from transformers import BertConfig, BertModel

    d = tmp_path_factory.mktemp("sent-enc")
    tokenizer.save_pretrained(d)
    torch.manual_seed(0)
    BertModel(
        BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=128,
        )
    ).save_pretrained(d)
    return str(d)


def test_sentscore_teacher_finetunes_and_builds_a_cache(encoder_dir, tmp_path):
    from click.testing import CliRunner

    from seqdistill.cache_schema import CacheReader, verify_cache
    from seqdistill.cli.cache import main as cache_cli
    from seqdistill.teachers import load_teacher

    (tmp_path / "train.txt").write_text(CONLL)
    r = CliRunner().invoke(
        cache_cli,
        [
            "finetune-teacher",
            "--encoder",
            encoder_dir,
            "--train",
            str(tmp_path / "train.txt"),
            "--dev",
            str(tmp_path / "train.txt"),
            "--out",
            str(tmp_path / "t"),
            "--head",
            "sentscore",
            "--epochs",
            "12",
            "--patience",
            "12",
            "--lr",
            "1e-2",
            "--batch-size",
            "4",
            "--device",
            "cpu",
        ],
    )
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "t" / "training.json").read_text())
    assert summary["history"][-1]["loss"] < summary["history"][0]["loss"] / 2
    assert summary["best_dev_f1"] == 1.0  # the toy task is learnt: SenTScore decodes every entity
    teacher = load_teacher(tmp_path / "t")
    assert teacher.kind == "sentscore" and teacher.schema.tags == ("O", "I", "LOC", "PER")
    long = ["anna", "visits", "rome"] * 9  # 27 words: more than the 11 sentinels, decoded in pieces
    pieces = teacher.predict([long[:11], long[11:22], long[22:]])
    assert teacher.predict([long])[0] == pieces[0] + pieces[1] + pieces[2]
    ids = torch.tensor([teacher.schema.encode(["PER", "O", "LOC"] * 9)])
    assert torch.isfinite(teacher.loss([long], ids)) and teacher.gold_nll(
        [long, ["anna"]], torch.cat([ids, torch.full((1, 27), -1)])
    ).isnan().tolist() == [False, True]

    (tmp_path / "raw.txt").write_text("anna visits rome\npeter visits paris today\n")
    r = CliRunner().invoke(
        cache_cli,
        [
            "build",
            "--out",
            str(tmp_path / "cache"),
            "--teacher",
            str(tmp_path / "t"),
            "--labelled",
            f"toy={tmp_path / 'train.txt'}",
            "--unlabelled",
            f"raw={tmp_path / 'raw.txt'}",
            "--device",
            "cpu",
        ],
    )
    assert r.exit_code == 0, r.output
    reader = CacheReader(str(tmp_path / "cache"))
    assert reader.manifest.label_schema.scheme == "sBIO" and reader.manifest.teachers["t"].decoding["k"] == 1
    assert verify_cache(str(tmp_path / "cache")) == []
    rows = list(
        reader.iter_examples(
            {"examples": ["words", "tags"], "t": ["kbest_paths", "kbest_scores", "tag_scores", "gold_nll"]}
        )
    )
    assert len(rows) == 18
    for row in rows:
        n = len(row["examples"]["words"])
        path, scores = row["t"]["kbest_paths"][0], row["t"]["tag_scores"]
        assert len(path) == n and scores.shape == (n, 4)
        assert list(path) == list(scores.argmax(1))  # greedy: the pseudo-label is each step's best tag
        assert row["t"]["kbest_scores"][0] == pytest.approx(scores.max(1).sum(), abs=1e-3)
        assert (row["t"]["gold_nll"] is None) == (row["examples"]["tags"] is None)


# -- the student recipe: eq. 2, few-shot splits, training from the cache -----------------------


def test_sentscore_kd_loss_by_hand():
    from seqdistill.students.losses import sentscore_kd_loss

    logits = torch.zeros(2, 1, 3)  # q = (1/3, 1/3, 1/3)
    tags = torch.tensor([[0], [0]])
    u = torch.tensor([[[math.log(0.5), math.log(0.5), float("-inf")]]] * 2)  # p* = (1/2, 1/2, 0) at tau 1
    mask = torch.ones(2, 1, dtype=torch.bool)
    got = sentscore_kd_loss(logits, tags, u, mask, torch.tensor([True, False]), lambda_kl=2.0, temperature=1.0)
    assert got.tolist() == pytest.approx([math.log(3) + 2 * math.log(1.5), math.log(3)], rel=1e-6)
    # tau flattens the teacher: u / 10 of scores (0, -10) gives p* = softmax(0, -1)
    u2 = torch.tensor([[[0.0, -10.0, float("-inf")]]])
    p = torch.softmax(torch.tensor([0.0, -1.0]), 0)
    expected = math.log(3) + sum(float(pi) * math.log(float(pi) * 3) for pi in p)
    assert sentscore_kd_loss(logits[:1], tags[:1], u2, mask[:1], torch.tensor([True])).item() == pytest.approx(
        expected, rel=1e-5
    )
    # Hinton's reading: the student softened by tau too, the KL scaled by tau^2. Student logits
    # (2, 0, 0): CE -log(e^2 / (e^2 + 2)); at tau 10, q_tau = softmax(0.2, 0, 0)
    z = torch.tensor([[[2.0, 0.0, 0.0]]])
    q_tau = [math.exp(0.2) / (math.exp(0.2) + 2), 1 / (math.exp(0.2) + 2)]
    ce = -math.log(math.exp(2) / (math.exp(2) + 2))
    kl = sum(float(pi) * math.log(float(pi) / qi) for pi, qi in zip(p, q_tau))
    got = sentscore_kd_loss(z, tags[:1], u2, mask[:1], torch.tensor([True]), soften_student=True)
    assert got.item() == pytest.approx(ce + 100 * kl, rel=1e-5)
    # its KL term vanishes where the student's logits are the teacher's scores plus a constant
    match = torch.tensor([[[3.0, -7.0, -1000.0]]])  # u2 + 3 on the allowed tags, nothing on the forbidden one
    ce_only = sentscore_kd_loss(match, tags[:1], u2, mask[:1], torch.tensor([True]), lambda_kl=0.0)
    hinton = sentscore_kd_loss(match, tags[:1], u2, mask[:1], torch.tensor([True]), soften_student=True)
    assert hinton.item() == pytest.approx(ce_only.item(), abs=1e-4)


def test_few_shot_split(tmp_path):
    from seqdistill.corpora.splits import few_shot_split

    (tmp_path / "all.txt").write_text(CONLL)
    few_shot_split(str(tmp_path / "all.txt"), tmp_path / "fs", 3, 2, seed=1)
    train = (tmp_path / "fs" / "gold_train.txt").read_text().strip().split("\n\n")
    dev = (tmp_path / "fs" / "gold_dev.txt").read_text().strip().split("\n\n")
    silver = (tmp_path / "fs" / "silver.txt").read_text().splitlines()
    assert (len(train), len(dev), len(silver)) == (3, 2, 11)
    assert all(len(line.split()) == 3 for line in silver) and "B-" not in "".join(silver)
    few_shot_split(str(tmp_path / "all.txt"), tmp_path / "fs2", 3, 2, seed=1)
    assert (tmp_path / "fs2" / "gold_train.txt").read_text() == (tmp_path / "fs" / "gold_train.txt").read_text()
    with pytest.raises(Exception, match="cannot draw 10 train"):
        few_shot_split(str(tmp_path / "all.txt"), tmp_path / "x", 10, 6)
    # a held-out test set: drawn first (the same whatever the train/dev sizes), in no other file
    paths = few_shot_split(str(tmp_path / "all.txt"), tmp_path / "fs3", 3, 2, seed=1, n_test=4)
    other = few_shot_split(str(tmp_path / "all.txt"), tmp_path / "fs4", 2, 1, seed=1, n_test=4)
    test = open(paths["gold_test"]).read()
    assert test == open(other["gold_test"]).read() and len(test.strip().split("\n\n")) == 4
    sizes = [len(open(paths[k]).read().strip().split("\n\n")) for k in ("gold_train", "gold_dev", "gold_test")]
    assert sizes + [len(open(paths["silver"]).read().splitlines())] == [3, 2, 4, 16 - 3 - 2 - 4]  # a partition


def test_few_shot_split_names_integer_tags(tmp_path):
    """A Parquet corpus with integer tag ids: --tag-names names them, and the files hold the names."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from click.testing import CliRunner

    from seqdistill.cli.cache import main as cache_cli

    rows = [(["Ann", "ran", str(i)], [1, 0, 0]) for i in range(8)]
    table = pa.table({"tokens": [w for w, _ in rows], "ner_tags": [t for _, t in rows]})
    pq.write_table(table, tmp_path / "ids.parquet")
    args = ["few-shot-split", "--corpus", str(tmp_path / "ids.parquet"), "--train", "3", "--dev", "2"]
    r = CliRunner().invoke(cache_cli, args + ["--out", str(tmp_path / "a")])
    assert r.exit_code != 0 and "--tag-names" in r.output  # ids without names are refused, and the fix named
    r = CliRunner().invoke(cache_cli, args + ["--out", str(tmp_path / "b"), "--tag-names", "O,B-PER"])
    assert r.exit_code == 0, r.output
    train = (tmp_path / "b" / "gold_train.txt").read_text().strip().split("\n\n")
    assert len(train) == 3 and all(block.splitlines()[0].split() == ["Ann", "B-PER"] for block in train)


def test_sentscore_student_learns_from_the_cache(encoder_dir, tmp_path):
    from click.testing import CliRunner

    from seqdistill.cli.cache import main as cache_cli
    from seqdistill.cli.train import main as train_cli
    from seqdistill.students.archs import load_student
    from seqdistill.students.common import predict_tags

    (tmp_path / "all.txt").write_text(CONLL * 2)
    r = CliRunner().invoke(
        cache_cli,
        [
            "few-shot-split",
            "--corpus",
            str(tmp_path / "all.txt"),
            "--out",
            str(tmp_path / "fs"),
            "--train",
            "8",
            "--dev",
            "4",
        ],
    )
    assert r.exit_code == 0, r.output
    fs = tmp_path / "fs"
    r = CliRunner().invoke(
        cache_cli,
        [
            "finetune-teacher",
            "--encoder",
            encoder_dir,
            "--train",
            str(fs / "gold_train.txt"),
            "--dev",
            str(fs / "gold_dev.txt"),
            "--out",
            str(tmp_path / "t"),
            "--head",
            "sentscore",
            "--epochs",
            "25",
            "--patience",
            "25",
            "--lr",
            "1e-2",
            "--batch-size",
            "4",
            "--device",
            "cpu",
        ],
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(
        cache_cli,
        [
            "build",
            "--out",
            str(tmp_path / "cache"),
            "--teacher",
            str(tmp_path / "t"),
            "--labelled",
            f"toy={fs / 'gold_train.txt'}@train",
            "--labelled",
            f"toy={fs / 'gold_dev.txt'}@dev",
            "--unlabelled",
            f"silver={fs / 'silver.txt'}",
            "--device",
            "cpu",
            "--shard-size",
            "4",
        ],
    )
    assert r.exit_code == 0, r.output
    for lam in ("1", "0"):
        out = tmp_path / f"s{lam}"
        r = CliRunner().invoke(
            train_cli,
            [
                "--cache",
                str(tmp_path / "cache"),
                "--out",
                str(out),
                "--recipe",
                "sentscore",
                "--lambda-kl",
                lam,
                "--embedding",
                "random",
                "--embedding-dim",
                "8",
                "--hidden-size",
                "16",
                "--epochs",
                "15",
                "--lr",
                "0.02",
                "--dropout",
                "0",
                "--device",
                "cpu",
            ],
        )
        assert r.exit_code == 0, r.output
        summary = json.loads((out / "training.json").read_text())
        assert summary["train"] == ["toy/train", "silver/unlabelled"]
        assert summary["best_dev_f1"] == 1.0, summary["history"]
    model, tok = load_student(tmp_path / "s1")
    assert model.config.schema.scheme == "sBIO"
    assert predict_tags(model, tok, [["anna", "visits", "rome"]]) == [["PER", "O", "LOC"]]
    # fixed SVD rows (the default): two seeds train different BiLSTMs over the same, untouched
    # embeddings; --train-embeddings moves them
    frozen = []
    for seed in ("1", "2", "3"):
        args = ["--cache", str(tmp_path / "cache"), "--out", str(tmp_path / f"f{seed}"), "--recipe", "sentscore"]
        args += ["--train-embeddings"] if seed == "3" else []
        args += ["--kd-softens", "both", "--embedding", "svd", "--embedding-dim", "8"]
        args += ["--hidden-size", "16", "--epochs", "15", "--lr", "0.02", "--dropout", "0", "--seed", seed]
        r = CliRunner().invoke(train_cli, args + ["--device", "cpu"])
        assert r.exit_code == 0, r.output
        frozen.append(load_student(tmp_path / f"f{seed}")[0])
    assert not frozen[0].config.extra["train_embeddings"] and frozen[0].config.extra["kd_softens"] == "both"
    assert torch.equal(frozen[0].embed.weight, frozen[1].embed.weight)
    assert not torch.equal(frozen[0].lstm.weight_ih_l0, frozen[1].lstm.weight_ih_l0)
    assert not torch.equal(frozen[0].embed.weight, frozen[2].embed.weight)
    assert all(json.loads((tmp_path / f"f{s}" / "training.json").read_text())["best_dev_f1"] == 1.0 for s in "123")
    # gold rows alone: the KL term reaches them with --kd-rows all only (the teacher's scores of the
    # gold sentences); over silver rows alone lambda_KL = 1 trains the very student lambda_KL = 0 does
    gold_only = {}
    for name, opts in {
        "l0": ["--lambda-kl", "0"],
        "silver": ["--kd-rows", "silver"],
        "all": ["--kd-rows", "all"],
    }.items():
        args = ["--cache", str(tmp_path / "cache"), "--out", str(tmp_path / f"g{name}"), "--recipe", "sentscore"]
        args += opts + ["--no-unlabelled", "--embedding", "random", "--embedding-dim", "8", "--hidden-size", "8"]
        r = CliRunner().invoke(train_cli, args + ["--epochs", "3", "--patience", "3", "--device", "cpu"])
        assert r.exit_code == 0, r.output
        gold_only[name] = load_student(tmp_path / f"g{name}")[0]
    assert gold_only["all"].config.extra["kd_rows"] == "all"
    assert torch.equal(gold_only["silver"].lstm.weight_ih_l0, gold_only["l0"].lstm.weight_ih_l0)
    assert not torch.equal(gold_only["all"].lstm.weight_ih_l0, gold_only["l0"].lstm.weight_ih_l0)
    from conftest import resumes_and_runs_under_torchrun

    resumes_and_runs_under_torchrun(
        "sentscore",
        str(tmp_path / "cache"),
        {
            "embedding": "random",
            "embedding-dim": 8,
            "hidden-size": 8,
            "epochs": 3,
            "patience": 5,
            "batch-size": 4,
            "checkpoint-every": 2,
        },
        tmp_path / "runs",
        kill_at=5,
    )
