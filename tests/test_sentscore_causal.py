"""SenTScore over decoder-only LMs (issue 35): batched beam search against one candidate at a time
and against brute-force enumeration on tiny random Llama and Gemma 3 models, a causal teacher
fine-tuned into a cache, and a Gemma-style tokenizer's <unusedN> sentinels."""

import itertools
import json

import pytest
import torch
from test_sentscore import CONLL, WORDS, _sentences

from seqdistill.teachers import sentscore_static
from seqdistill.teachers.sentscore_search import SentFormat, sbio_tags, sentscore, sentscore_one_at_a_time

TAGS = ["O", "I", "LOC", "PER"]
# what the tiny Llama and Gemma 3 share
TINY = dict(
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=256,
    pad_token_id=0,
    bos_token_id=2,
    eos_token_id=1,
)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """A Gemma-style tokenizer: <bos> before every text, <unusedN> sentinels, word pieces."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    chars = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["<pad>", "<eos>", "<bos>", "<unk>", *(f"<unused{i}>" for i in range(12))]
    vocab += [*chars, *("##" + c for c in chars), *WORDS, *TAGS]
    ids = {w: i for i, w in enumerate(vocab)}
    tok = Tokenizer(models.WordPiece(ids, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", ids["<bos>"])])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    d = tmp_path_factory.mktemp("gemma-tok")
    fast.save_pretrained(d)
    return PreTrainedTokenizerFast.from_pretrained(d)


def _llama(vocab_size):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab_size, **TINY)
    return LlamaForCausalLM(cfg).eval()


def _gemma3(vocab_size, sliding_window=48):
    """Gemma 3's text model: a sliding-window layer and a full one, tied embeddings."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    cfg = Gemma3TextConfig(
        vocab_size=vocab_size,
        head_dim=8,
        sliding_window=sliding_window,
        layer_types=["sliding_attention", "full_attention"],
        **TINY,
    )
    return Gemma3ForCausalLM(cfg).eval()


def test_gemma_style_sentinels_and_prompt(tokenizer):
    fmt = SentFormat(tokenizer, sbio_tags(["LOC", "PER"]))
    s = tokenizer.convert_tokens_to_ids
    assert fmt.max_words == 11 and fmt.prefix == [s("<bos>")] and fmt.suffix == []
    assert fmt.encode_input(["anna", "visits"], causal=True) == [
        s("<bos>"),
        s("<unused0>"),
        s("anna"),
        s("<unused1>"),
        s("visits"),
        s("<unused2>"),
    ]
    assert fmt.encode_target(["PER", "O"]) == [s("<unused0>"), s("PER"), s("<unused1>"), s("O"), s("<unused2>"), 1]


# "geoloc" is not in the tiny vocabulary: a tag of six word pieces beside one-token tags, as
# WNUT-2016's "geo-loc" (3 pieces) or CoNLL-2003's "MISC" (2) are in Gemma's (the cache rows keep
# blocks of different widths, right-aligned)
MULTI_TOKEN_TYPES = ["PER", "geoloc"]
TAG_SETS = pytest.mark.parametrize(
    "types", [["LOC", "PER"], MULTI_TOKEN_TYPES], ids=["one-token-tags", "multi-token-tags"]
)


@TAG_SETS
@pytest.mark.parametrize("make", [_llama, _gemma3], ids=["llama", "gemma3"])
def test_greedy_causal_sentscore_equals_one_candidate_at_a_time(tokenizer, make, types):
    """Left-padded prompts of different lengths, a batch of 6: every sentence's tags and scores
    are those of full passes over prompt + prefix + candidate, one at a time."""
    model = make(len(tokenizer))
    fmt = SentFormat(tokenizer, sbio_tags(types))
    assert max(len(t) for t in fmt.tag_ids) == (6 if "geoloc" in types else 1)
    sents = _sentences(6, 1)
    out = sentscore(model, fmt, sents, k=1)
    for b, words in enumerate(sents):
        tags, scores = sentscore_one_at_a_time(model, fmt, words)
        assert out.tags[b, 0, : len(words)].tolist() == tags
        torch.testing.assert_close(out.tag_scores[b, 0, : len(words)], torch.tensor(scores), atol=1e-4, rtol=1e-4)
        assert out.beam_scores[b, 0].item() == pytest.approx(sum(s[t] for s, t in zip(scores, tags)), abs=1e-3)


def test_nan_scores_are_refused_by_sentence(tokenizer):
    """A model whose outputs are NaN gives a clear error naming the sentence, not tags chosen by a
    ``topk`` over NaN (whose indices, on a GPU, fail far from the cause)."""
    model = _llama(len(tokenizer))
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight[0, 0] = float("nan")
    fmt = SentFormat(tokenizer, sbio_tags(["LOC", "PER"]))
    with pytest.raises(ValueError, match="NaN log-likelihoods at word 1 of the sentence"):
        sentscore(model, fmt, _sentences(3, 1), k=2)


def _causal_log_likelihood(model, fmt, words, tags):
    """log L(t_1 s_1 ... t_L s_L | prompt, s_0) by one pass over the whole sequence."""
    prompt = fmt.encode_input(words, causal=True)
    target = fmt.encode_target(tags)[:-1]  # without the end-of-sequence token
    ids = torch.tensor([prompt + target])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits, -1)[0]
    start = len(prompt) + 1  # after the target's s_0
    return sum(logp[j - 1, ids[0, j]].item() for j in range(start, ids.shape[1]))


def every_path(model, fmt, words):
    """Every valid sBIO sequence of ``words`` with its log-likelihood by one pass, best first."""
    return sorted(
        (
            (_causal_log_likelihood(model, fmt, words, list(seq)), seq)
            for seq in itertools.product(fmt.tags, repeat=len(words))
            if seq[0] != "I" and not any(a == "O" and c == "I" for a, c in zip(seq, seq[1:]))
        ),
        reverse=True,
    )


@TAG_SETS
@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_wide_causal_beam_is_exact_against_brute_force(tokenizer, types, static):
    """Both searches: the dynamic one and the static one (sentscore_static.py)."""
    model = _gemma3(len(tokenizer), sliding_window=64)  # three words with six-piece tags fit
    fmt = SentFormat(tokenizer, sbio_tags(types))
    sents = [["anna", "visits", "rome"], ["rome"]]
    K = 64  # every valid 3-tag sequence fits: the beam search is exact
    out = sentscore_static.sentscore(model, fmt, sents, k=K, static=static)
    for b, words in enumerate(sents):
        every = every_path(model, fmt, words)
        got = [
            (out.beam_scores[b, j].item(), tuple(fmt.tags[t] for t in out.tags[b, j, : len(words)].tolist()))
            for j in range(len(every))
        ]
        assert [s for _, s in got] == [s for _, s in every]
        for (g, _), (e, _) in zip(got, every):
            assert g == pytest.approx(e, abs=1e-3)
        assert torch.isinf(out.beam_scores[b, len(every) :]).all()


def test_a_sentence_longer_than_the_window_is_scored_in_pieces(tokenizer, tmp_path):
    """Gemma 3's sliding window bounds a piece (prompt and target together): a long sentence is
    cut where the window would slide, and each piece is the piece scored alone."""
    from seqdistill.cache_schema import LabelSchema
    from seqdistill.teachers.kinds.sentscore import SentScoreTeacher

    teacher = SentScoreTeacher(
        _gemma3(len(tokenizer), sliding_window=40), tokenizer, LabelSchema("sBIO", ("LOC", "PER"))
    )
    words = ["anna", "visits", "rome", "peter"] * 3  # 12 words: over the 11 sentinels and the window of 39
    spans = teacher._spans(words)
    assert len(spans) > 1 and spans[0][0] == 0 and spans[-1][1] == 12
    # the first piece is the longest start that the search itself accepts (SentFormat.causal_tokens)
    fmt = teacher.format
    assert spans[0][1] == max(i for i in range(1, fmt.max_words + 1) if fmt.causal_tokens(words[:i]) <= 39)
    for s, e in spans:
        prompt = teacher.format.encode_input(words[s:e], causal=True)
        assert len(prompt) + 1 + 2 * (e - s) + 1 <= 39  # prompt, s_0, "t s_i" blocks, end of sequence
    whole = teacher.predict([words])[0]
    assert whole == sum((teacher.predict([words[s:e]])[0] for s, e in spans), [])


def test_sentscore_fills_the_window_and_refuses_past_it(tokenizer):
    """The low-level search takes a sentence whose sequence fills the sliding window exactly (the
    cache never slides: the same path as one candidate at a time) and refuses one token more with
    an error naming the sentence, where a sliding cache would be cut short (an index out of bounds
    far from the cause, on a GPU a device-side assert)."""
    model = _gemma3(len(tokenizer), sliding_window=40)
    fmt = SentFormat(tokenizer, TAGS)
    words = ["anna", "visits", "rome", "peter"] * 3
    n = max(i for i in range(1, len(words) + 1) if fmt.causal_tokens(words[:i]) <= 39)
    fits = words[:n]
    assert n < len(words) and fmt.causal_tokens(fits) >= 39 - fmt.word_tokens(words[n]) - fmt.tag_block + 1
    path, _ = sentscore_one_at_a_time(model, fmt, fits)
    assert sentscore(model, fmt, [fits]).tags[0, 0, :n].tolist() == path
    with pytest.raises(ValueError, match="split it into pieces"):
        sentscore(model, fmt, [fits, words[: n + 1]])


@pytest.fixture(scope="module")
def causal_dir(tmp_path_factory, tokenizer):
    d = tmp_path_factory.mktemp("causal-lm")
    tokenizer.save_pretrained(d)
    _gemma3(len(tokenizer)).save_pretrained(d)
    return str(d)


def test_causal_sentscore_teacher_finetunes_and_builds_a_cache(causal_dir, tmp_path):
    """`finetune-teacher --head sentscore` detects the causal LM from its config; the saved
    teacher loads as one, builds a cache like an encoder-decoder's, and its gold NLL is the
    target's log-likelihood after the prompt."""
    from click.testing import CliRunner

    from seqdistill.cache_schema import CacheReader, verify_cache
    from seqdistill.cli.cache import main as cache_cli
    from seqdistill.teachers import load_teacher

    (tmp_path / "train.txt").write_text(CONLL)
    args = ["finetune-teacher", "--encoder", causal_dir, "--train", str(tmp_path / "train.txt")]
    args += ["--dev", str(tmp_path / "train.txt"), "--out", str(tmp_path / "t"), "--head", "sentscore"]
    args += ["--epochs", "15", "--patience", "15", "--lr", "3e-2", "--batch-size", "4", "--device", "cpu"]
    r = CliRunner().invoke(cache_cli, args)
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "t" / "training.json").read_text())
    assert summary["history"][-1]["loss"] < summary["history"][0]["loss"] / 2
    assert summary["best_dev_f1"] == 1.0
    teacher = load_teacher(tmp_path / "t")
    assert teacher.causal and type(teacher.model).__name__ == "Gemma3ForCausalLM"
    assert json.loads((tmp_path / "t" / "teacher.json").read_text())["architecture"] == "causal"
    words, tags = ["anna", "visits", "rome"], ["PER", "O", "LOC"]
    nll = teacher.gold_nll([words], torch.tensor([teacher.schema.encode(tags)]))
    prompt = teacher.format.encode_input(words, causal=True)
    target = teacher.format.encode_target(tags)
    ids = torch.tensor([prompt + target])
    with torch.no_grad():
        logp = torch.log_softmax(teacher.model(input_ids=ids).logits, -1)[0]
    by_hand = -sum(logp[j - 1, ids[0, j]].item() for j in range(len(prompt), ids.shape[1]))
    assert nll.item() == pytest.approx(by_hand, rel=1e-4)

    from seqdistill.cli.evaluate import eval_main

    r = CliRunner().invoke(eval_main, ["--model", str(tmp_path / "t"), "--data", str(tmp_path / "train.txt")])
    assert r.exit_code == 0, r.output
    assert "100.00" in r.output  # distill-eval reads a causal teacher as any other

    (tmp_path / "raw.txt").write_text("anna visits rome\npeter visits paris today\n")
    args = ["build", "--out", str(tmp_path / "cache"), "--teacher", str(tmp_path / "t")]
    args += ["--labelled", f"toy={tmp_path / 'train.txt'}", "--unlabelled", f"raw={tmp_path / 'raw.txt'}"]
    r = CliRunner().invoke(cache_cli, args + ["--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert verify_cache(str(tmp_path / "cache")) == []
    reader = CacheReader(str(tmp_path / "cache"))
    rows = list(reader.iter_examples({"examples": ["words", "tags"], "t": ["kbest_paths", "tag_scores", "gold_nll"]}))
    assert len(rows) == 18
    for row in rows:
        path, scores = row["t"]["kbest_paths"][0], row["t"]["tag_scores"]
        assert list(path) == list(scores.argmax(1))
        assert (row["t"]["gold_nll"] is None) == (row["examples"]["tags"] is None)
        if row["examples"]["tags"] is not None:
            assert [teacher.schema.tags[t] for t in path] == ["PER", "O", "LOC"]


# -- LoRA and frozen embeddings (teachers/adapters.py) --------------------------------------------


def test_lora_merges_to_the_outputs_of_the_adapter_model(tokenizer):
    """The merged copy a LoRA teacher is saved as scores every tag as the model with adapters does
    (adapters made non-zero first: peft starts them at zero), and merging leaves the adapters in
    training."""
    from seqdistill.cache_schema import LabelSchema
    from seqdistill.teachers.adapters import attach_lora, merged, trainable
    from seqdistill.teachers.kinds.sentscore import SentScoreTeacher

    teacher = SentScoreTeacher(_gemma3(len(tokenizer)), tokenizer, LabelSchema("sBIO", ("LOC", "PER")))
    before = teacher.outputs(_sentences(4, 2))
    attach_lora(teacher, rank=4)
    n_train, n_all = trainable(teacher)
    assert 0 < n_train < n_all / 2
    assert all("lora_" in name for name, p in teacher.named_parameters() if p.requires_grad)
    torch.manual_seed(1)
    for name, p in teacher.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.5)
    words = _sentences(4, 2)
    adapted = teacher.outputs(words)
    assert not torch.allclose(adapted.logits, before.logits)  # the adapters change the scores
    with merged(teacher) as plain:
        assert type(plain.model).__name__ == "Gemma3ForCausalLM"
        flat = plain.outputs(words)
    torch.testing.assert_close(flat.logits, adapted.logits, atol=1e-4, rtol=1e-4)
    assert torch.equal(flat.kbest_paths, adapted.kbest_paths)
    assert type(teacher.model).__name__ == "PeftModel"  # still training over the adapters


def test_finetune_with_lora_and_frozen_embeddings_saves_a_plain_merged_teacher(causal_dir, tmp_path):
    from click.testing import CliRunner
    from safetensors.torch import load_file

    from seqdistill.cli.cache import main as cache_cli
    from seqdistill.teachers import load_teacher

    (tmp_path / "train.txt").write_text(CONLL)
    args = ["finetune-teacher", "--encoder", causal_dir, "--train", str(tmp_path / "train.txt")]
    args += ["--dev", str(tmp_path / "train.txt"), "--out", str(tmp_path / "t"), "--head", "sentscore"]
    args += ["--epochs", "2", "--lr", "3e-2", "--batch-size", "4", "--device", "cpu"]
    r = CliRunner().invoke(cache_cli, args + ["--lora-rank", "4", "--freeze-embeddings"])
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "t" / "training.json").read_text())
    assert 0 < summary["trainable_params"] < summary["params"] / 2 and summary["peak_rss_mb"] > 0
    saved = load_file(str(tmp_path / "t" / "model.safetensors"))
    assert not any("lora" in k for k in saved)  # a plain model: adapters merged
    original = load_file(f"{causal_dir}/model.safetensors")
    emb = next(k for k in original if k.endswith("embed_tokens.weight"))
    assert torch.equal(saved[emb], original[emb])  # frozen
    layer = next(k for k in original if k.endswith("layers.0.self_attn.q_proj.weight"))
    assert not torch.equal(saved[layer], original[layer])  # the adapters, merged in
    teacher = load_teacher(tmp_path / "t")
    assert type(teacher.model).__name__ == "Gemma3ForCausalLM"
    r = CliRunner().invoke(cache_cli, args + ["--co-finetune", "--lora-rank", "2"])
    assert r.exit_code != 0 and "--lora-rank" in r.output


def test_lora_on_an_encoder_teacher(tiny_encoder, tmp_path):
    """A CRF teacher with LoRA on its encoder: only adapters, head and CRF train; the saved
    encoder is a plain BertModel."""
    from click.testing import CliRunner

    from seqdistill.cli.cache import main as cache_cli
    from seqdistill.teachers import load_teacher

    (tmp_path / "train.txt").write_text(CONLL)
    args = ["finetune-teacher", "--encoder", tiny_encoder, "--train", str(tmp_path / "train.txt")]
    args += ["--dev", str(tmp_path / "train.txt"), "--out", str(tmp_path / "t"), "--epochs", "1"]
    r = CliRunner().invoke(cache_cli, args + ["--batch-size", "8", "--device", "cpu", "--lora-rank", "2"])
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "t" / "training.json").read_text())
    assert summary["trainable_params"] < summary["params"] / 2
    teacher = load_teacher(tmp_path / "t")
    assert type(teacher.encoder).__name__ == "BertModel"


def test_a_student_learns_from_a_causal_teachers_cache(causal_dir, tmp_path):
    """The students see no difference: the sentscore recipe over a causal teacher's cache, with
    SVD embeddings from the LM's exported input embeddings, learns the toy task."""
    from click.testing import CliRunner

    from seqdistill.cli.cache import main as cache_cli
    from seqdistill.cli.train import main as train_cli

    (tmp_path / "train.txt").write_text(CONLL)
    args = ["finetune-teacher", "--encoder", causal_dir, "--train", str(tmp_path / "train.txt")]
    args += ["--dev", str(tmp_path / "train.txt"), "--out", str(tmp_path / "t"), "--head", "sentscore"]
    r = CliRunner().invoke(cache_cli, args + ["--epochs", "15", "--lr", "3e-2", "--batch-size", "4", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    (tmp_path / "raw.txt").write_text("anna visits rome\npeter visits paris\n" * 4)
    args = ["build", "--out", str(tmp_path / "cache"), "--teacher", str(tmp_path / "t"), "--device", "cpu"]
    args += ["--labelled", f"toy={tmp_path / 'train.txt'}@train", "--labelled", f"toy={tmp_path / 'train.txt'}@dev"]
    r = CliRunner().invoke(cache_cli, args + ["--unlabelled", f"raw={tmp_path / 'raw.txt'}"])
    assert r.exit_code == 0, r.output
    args = ["--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "s"), "--recipe", "sentscore"]
    args += ["--embedding", "svd", "--embedding-dim", "8", "--hidden-size", "16", "--epochs", "15"]
    r = CliRunner().invoke(train_cli, args + ["--lr", "0.02", "--dropout", "0", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "s" / "training.json").read_text())
    assert summary["best_dev_f1"] == 1.0, summary["history"]


def test_causal_loss_is_transformers_loss_on_the_target_tokens(tokenizer):
    """The loss projects the target positions only; it is transformers' own mean LM loss with the
    prompt's labels ignored (right-padded batch of different lengths)."""
    from seqdistill.cache_schema import LabelSchema
    from seqdistill.teachers.kinds.sentscore import SentScoreTeacher
    from seqdistill.teachers.sentscore_search import encode_sequences

    teacher = SentScoreTeacher(_gemma3(len(tokenizer)), tokenizer, LabelSchema("sBIO", ("LOC", "PER")))
    words = [["anna", "visits", "rome"], ["peter"], ["the", "eu", "visits", "paris", "anna"]]
    tags = [["PER", "O", "LOC"], ["PER"], ["O", "ORG", "O", "LOC", "PER"]]
    tags = [[t if t in teacher.schema.tags else "O" for t in ts] for ts in tags]
    ids = torch.full((3, 5), -1)
    for b, ts in enumerate(tags):
        ids[b, : len(ts)] = torch.tensor(teacher.schema.encode(ts))
    seq, mask, labels = encode_sequences(teacher.format, words, tags)
    expected = teacher.model(input_ids=seq, attention_mask=mask, labels=labels).loss
    assert (labels[0, : len(teacher.format.encode_input(words[0], causal=True))] == -100).all()
    torch.testing.assert_close(teacher.loss(words, ids), expected, atol=1e-5, rtol=1e-5)
