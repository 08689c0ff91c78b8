"""In-context SenTScore (issue 55): demonstrations before every prompt, their key/value cache computed
once and shared by every sentence and beam, against the same prompts encoded whole and against
brute-force enumeration of every tag sequence, on tiny random Llama and Gemma 3 models."""

import pytest
import torch
from test_sentscore import _sentences
from test_sentscore_causal import _gemma3, _llama, every_path, tokenizer  # noqa: F401

from seqdistill.teachers.sentscore_search import SentFormat, sbio_tags, sentscore, sentscore_one_at_a_time

DEMOS = [
    (["anna", "visits", "rome"], ["PER", "O", "LOC"]),
    (["peter", "visits", "the", "eu"], ["PER", "O", "O", "LOC"]),
]
MODELS = pytest.mark.parametrize("make", [_llama, lambda n: _gemma3(n, sliding_window=200)], ids=["llama", "gemma3"])


def _format(tokenizer, demos=DEMOS):  # noqa: F811
    fmt = SentFormat(tokenizer, sbio_tags(["LOC", "PER"]))
    fmt.set_demonstrations(demos)
    return fmt


def test_demonstrations_come_first_in_sent_prime_form(tokenizer):  # noqa: F811
    fmt = _format(tokenizer, DEMOS[:1])
    plain = SentFormat(tokenizer, sbio_tags(["LOC", "PER"]))
    s = tokenizer.convert_tokens_to_ids
    demo = plain.encode_input(DEMOS[0][0], causal=True)[1:] + plain.encode_target(DEMOS[0][1])[:-1]  # no <eos>
    assert fmt.context == [s("<bos>"), *demo]  # the tokenizer's newline is no token here
    assert fmt.encode_input(["rome"], causal=True) == fmt.context + [s("<unused0>"), s("rome"), s("<unused1>")]
    fmt.set_demonstrations([])
    assert fmt.encode_input(["rome"], causal=True) == plain.encode_input(["rome"], causal=True)


@MODELS
@pytest.mark.parametrize("k", [1, 3])
def test_the_shared_demonstration_cache_gives_the_scores_of_prompts_encoded_whole(tokenizer, make, k):  # noqa: F811
    model = make(len(tokenizer))
    fmt = _format(tokenizer)
    sents = _sentences(5, 3)
    shared = sentscore(model, fmt, sents, k=k)
    whole = sentscore(model, fmt, sents, k=k, share_context=False)
    assert torch.equal(shared.tags, whole.tags)
    torch.testing.assert_close(shared.beam_scores, whole.beam_scores, atol=1e-4, rtol=0)
    finite = torch.isfinite(whole.tag_scores)
    assert torch.equal(finite, torch.isfinite(shared.tag_scores))
    torch.testing.assert_close(shared.tag_scores[finite], whole.tag_scores[finite], atol=1e-4, rtol=0)
    again = sentscore(model, fmt, sents, k=k)  # the kept cache is copied, never cut in place
    assert torch.equal(again.tags, shared.tags) and torch.equal(again.beam_scores, shared.beam_scores)


@MODELS
def test_greedy_in_context_sentscore_equals_one_candidate_at_a_time(tokenizer, make):  # noqa: F811
    model = make(len(tokenizer))
    fmt = _format(tokenizer)
    sents = _sentences(4, 5)
    out = sentscore(model, fmt, sents, k=1)
    for b, words in enumerate(sents):
        tags, scores = sentscore_one_at_a_time(model, fmt, words)  # demonstrations and prompt, whole, every time
        assert out.tags[b, 0, : len(words)].tolist() == tags
        got = out.tag_scores[b, 0, : len(words)]
        want = torch.tensor(scores)
        assert torch.equal(torch.isinf(got), torch.isinf(want))
        torch.testing.assert_close(got[torch.isfinite(got)], want[torch.isfinite(want)], atol=1e-4, rtol=0)


def test_in_context_beam_is_exact_against_brute_force(tokenizer):  # noqa: F811
    model = _gemma3(len(tokenizer), sliding_window=200)
    fmt = _format(tokenizer)
    words = ["anna", "visits", "paris"]
    out = sentscore(model, fmt, [words], k=64)  # every valid sequence of 3 tags fits in the beam
    every = every_path(model, fmt, words)
    got = [tuple(fmt.tags[t] for t in out.tags[0, j].tolist()) for j in range(len(every))]
    assert got == [s for _, s in every]
    for j, (e, _) in enumerate(every):
        assert out.beam_scores[0, j].item() == pytest.approx(e, abs=1e-3)


@pytest.fixture(scope="module")
def base_lm(tmp_path_factory, tokenizer):  # noqa: F811
    """A tiny Gemma 3 saved as a base LM, its sliding window (24) shorter than a prompt with demos."""
    d = tmp_path_factory.mktemp("base-lm")
    tokenizer.save_pretrained(d)
    _gemma3(len(tokenizer), sliding_window=24).save_pretrained(d)
    return d


CONLL_DEMOS = "".join(
    f"{a} B-PER\nvisits O\n{c} B-LOC\n\n" for a, c in [("anna", "paris"), ("peter", "rome"), ("anna", "rome")] * 2
)


def test_in_context_teacher_is_made_loaded_checked_and_built_into_a_cache(base_lm, tmp_path):
    """`distill-cache in-context-teacher` writes a directory without weights that loads as a
    sentscore teacher with its demonstrations, full attention past the model's window, and the
    model's sha256; a cache built from it names them; a model that changed is refused."""
    import json

    from click.testing import CliRunner

    from seqdistill.cache_schema import CacheReader, verify_cache
    from seqdistill.cli.cache import main as cache_cli
    from seqdistill.teachers import load_teacher
    from seqdistill.teachers.in_context import model_sha256

    (tmp_path / "demos.txt").write_text(CONLL_DEMOS)
    out = tmp_path / "icl"
    args = ["in-context-teacher", "--model", str(base_lm), "--demos", str(tmp_path / "demos.txt")]
    r = CliRunner().invoke(cache_cli, args + ["--n-demos", "3", "--seed", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert not (out / "model.safetensors").exists()
    meta = json.loads((out / "teacher.json").read_text())
    assert meta["kind"] == "sentscore" and meta["label_schema"]["scheme"] == "sBIO"
    record = meta["in_context"]
    assert record["model"] == str(base_lm) and record["model_sha256"] == model_sha256(str(base_lm))
    assert record["demonstrations"] == 3 and record["pool"]["sentences"] == 6
    demos = [json.loads(line) for line in (out / "demonstrations.jsonl").read_text().splitlines()]
    assert all(d["tags"] == ["PER", "O", "LOC"] for d in demos) and len(demos) == 3

    teacher = load_teacher(out)
    assert teacher.demonstrations == [(d["words"], d["tags"]) for d in demos]
    assert len(teacher.format.context) > 24  # longer than the window: every layer attends to all of it
    assert set(teacher.model.config.layer_types) == {"full_attention"}
    words = [["anna", "visits", "rome"], ["peter"]]
    by_search = sentscore(teacher.model, teacher.format, words, k=1)
    assert teacher.predict(words) == [
        [teacher.format.tags[t] for t in by_search.tags[b, 0, : len(w)].tolist()] for b, w in enumerate(words)
    ]

    (tmp_path / "raw.txt").write_text("anna visits rome\npeter visits paris today\n")
    cache = tmp_path / "cache"
    args = ["build", "--out", str(cache), "--teacher", str(out), "--unlabelled", f"raw={tmp_path / 'raw.txt'}"]
    r = CliRunner().invoke(cache_cli, args + ["--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert verify_cache(str(cache)) == []
    fingerprints = CacheReader(str(cache)).manifest.teachers["icl"].fingerprints
    assert fingerprints["model"] == record["model_sha256"] and fingerprints["demonstrations"]

    weights = base_lm / "model.safetensors"
    original = weights.read_bytes()
    try:
        weights.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        with pytest.raises(Exception, match="changed since the teacher was made"):
            load_teacher(out)
    finally:
        weights.write_bytes(original)


def test_in_context_teacher_refuses_a_hub_name_and_too_many_demos(base_lm, tmp_path):
    from click.testing import CliRunner

    from seqdistill.cli.cache import main as cache_cli

    (tmp_path / "demos.txt").write_text(CONLL_DEMOS)
    base = ["in-context-teacher", "--demos", str(tmp_path / "demos.txt"), "--out", str(tmp_path / "t")]
    r = CliRunner().invoke(cache_cli, base + ["--model", "google/gemma-3-270m"])
    assert r.exit_code != 0 and "local directory or GGUF file" in r.output
    r = CliRunner().invoke(cache_cli, base + ["--model", str(base_lm), "--n-demos", "7"])
    assert r.exit_code != 0 and "--n-demos 7: the pool holds 6 sentences" in r.output
