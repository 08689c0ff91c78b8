"""SenTScore (paper 004): the SenT' format, and batched tag-wise beam search checked against one
candidate at a time and against brute-force enumeration on a tiny random model."""

import itertools
import json
import random

import pytest
import torch

from seqdistill.teachers.sentscore import SentFormat, sbio_tags, sentscore, sentscore_one_at_a_time

WORDS = ["the", "eu", "peter", "paris", "rome", "anna", "visits"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import BertTokenizer

    d = tmp_path_factory.mktemp("sent-tok")
    chars = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"[unused{i}]" for i in range(12)), *chars,
             *("##" + c for c in chars), *WORDS, "loc"]
    BertTokenizer(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True).save_pretrained(d)
    return BertTokenizer.from_pretrained(d)


def _t5(vocab_size):
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    cfg = T5Config(vocab_size=vocab_size, d_model=16, d_ff=32, d_kv=8, num_layers=2, num_decoder_layers=2,
                   num_heads=2, decoder_start_token_id=0, pad_token_id=0, eos_token_id=3, dropout_rate=0.0)
    return T5ForConditionalGeneration(cfg).eval()


def _bert2bert(vocab_size):
    from transformers import BertConfig, EncoderDecoderConfig, EncoderDecoderModel

    torch.manual_seed(0)
    kw = dict(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=32, max_position_embeddings=128, hidden_dropout_prob=0.0,
              attention_probs_dropout_prob=0.0)
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
    assert fmt.encode_input(["anna", "visits"]) == [s("[CLS]"), s("[unused0]"), s("anna"), s("[unused1]"),
                                                  s("visits"), s("[unused2]"), s("[SEP]")]
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
        assert (out.tags[b, 0, len(words):] == -1).all()
        torch.testing.assert_close(out.tag_scores[b, 0, : len(words)], torch.tensor(scores), atol=1e-4, rtol=1e-4)
        assert out.beam_scores[b, 0].item() == pytest.approx(sum(s[t] for s, t in zip(scores, tags)), abs=1e-3)
        decoded = [fmt.tags[t] for t in tags]
        assert decoded[0] != "I" and all(not (a == "O" and c == "I") for a, c in zip(decoded, decoded[1:]))


def _sequence_log_likelihood(model, fmt, words, tags):
    """log L(s_0 t_1 s_1 ... t_L s_L ; S_in) by one teacher-forced decoder pass."""
    from seqdistill.teachers.sentscore import _decoder_start, encode_batch

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
        got = [(out.beam_scores[b, j].item(), tuple(fmt.tags[t] for t in out.tags[b, j, : len(words)].tolist()))
               for j in range(min(K, n))]
        assert [s for _, s in got] == [s for _, s in every[: len(got)]]
        for (g, _), (e, _) in zip(got, every):
            assert g == pytest.approx(e, abs=1e-3)
        assert torch.isinf(out.beam_scores[b, n:]).all()  # beams beyond the valid sequences do not exist


# -- the teacher: fine-tuning on SenT' targets, and the cache it builds ------------------------

CONLL = "".join(f"{a} B-PER\nvisits O\n{c} B-LOC\n\n" for a, c in
                [("anna", "paris"), ("peter", "rome"), ("anna", "rome"), ("peter", "paris")] * 4)


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory, tokenizer):
    """A tiny random BERT with [unusedN] tokens: warm-started as encoder and decoder."""
    from transformers import BertConfig, BertModel

    d = tmp_path_factory.mktemp("sent-enc")
    tokenizer.save_pretrained(d)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=128)).save_pretrained(d)
    return str(d)


def test_sentscore_teacher_finetunes_and_builds_a_cache(encoder_dir, tmp_path):
    from click.testing import CliRunner

    from seqdistill.cache_schema import CacheReader, verify_cache
    from seqdistill.pipeline.cli import main as cache_cli
    from seqdistill.teachers import load_teacher

    (tmp_path / "train.txt").write_text(CONLL)
    r = CliRunner().invoke(cache_cli, ["finetune-teacher", "--encoder", encoder_dir, "--train", str(tmp_path / "train.txt"),
                                       "--dev", str(tmp_path / "train.txt"), "--out", str(tmp_path / "t"),
                                       "--head", "sentscore", "--epochs", "12", "--patience", "12", "--lr", "1e-2", "--batch-size", "4",
                                       "--device", "cpu"])
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "t" / "training.json").read_text())
    assert summary["history"][-1]["loss"] < summary["history"][0]["loss"] / 2
    assert summary["best_dev_f1"] == 1.0  # the toy task is learnt: SenTScore decodes every entity
    teacher = load_teacher(tmp_path / "t")
    assert teacher.kind == "sentscore" and teacher.schema.tags == ("O", "I", "LOC", "PER")

    (tmp_path / "raw.txt").write_text("anna visits rome\npeter visits paris today\n")
    r = CliRunner().invoke(cache_cli, ["build", "--out", str(tmp_path / "cache"), "--teacher", str(tmp_path / "t"),
                                       "--labelled", f"toy={tmp_path / 'train.txt'}",
                                       "--unlabelled", f"raw={tmp_path / 'raw.txt'}", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    reader = CacheReader(str(tmp_path / "cache"))
    assert reader.manifest.label_schema.scheme == "sBIO" and reader.manifest.teachers["t"].decoding["k"] == 1
    assert verify_cache(str(tmp_path / "cache")) == []
    rows = list(reader.iter_examples({"examples": ["words", "tags"], "t": ["kbest_paths", "kbest_scores",
                                                                         "tag_scores", "gold_nll"]}))
    assert len(rows) == 18
    for row in rows:
        n = len(row["examples"]["words"])
        path, scores = row["t"]["kbest_paths"][0], row["t"]["tag_scores"]
        assert len(path) == n and scores.shape == (n, 4)
        assert list(path) == list(scores.argmax(1))  # greedy: the pseudo-label is each step's best tag
        assert row["t"]["kbest_scores"][0] == pytest.approx(scores.max(1).sum(), abs=1e-3)
        assert (row["t"]["gold_nll"] is None) == (row["examples"]["tags"] is None)
