"""The semi-Markov CRF over flat segmentations against enumeration of every segmentation."""

import math

import pytest
import torch

from seqdistill.cache_schema import LabelSchema
from seqdistill.semicrf import bio_tags, kbest, log_partition, marginals, path_scores

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def segmentations(n: int, W: int, C: int):
    """Every flat segmentation of n words: lists of (start, width index, type), type -1 outside."""
    if n == 0:
        yield []
        return
    for rest in segmentations(n - 1, W, C):  # the last word outside
        yield rest + [(n - 1, 0, -1)]
    for w in range(min(W, n)):
        for c in range(C):
            for rest in segmentations(n - w - 1, W, C):
                yield rest + [(n - w - 1, w, c)]


def as_path(segments, n):
    path = [0] * n
    for i, w, c in segments:
        if c >= 0:
            path[i] = 1 + 2 * c
            for t in range(i + 1, i + w + 1):
                path[t] = 2 + 2 * c
    return path


def enumerate_sentence(phi, n):
    """(IOB2 paths, their scores S(y)) of every segmentation of one sentence."""
    W, C = phi.shape[1], phi.shape[2]
    paths, scores = [], []
    for seg in segmentations(n, W, C):
        paths.append(as_path(seg, n))
        scores.append(sum(float(phi[i, w, c]) for i, w, c in seg if c >= 0))
    return paths, torch.tensor(scores)


def problem(seed, B=4, L=6, W=3, C=2):
    g = torch.Generator().manual_seed(seed)
    phi = torch.randn(B, L, W, C, generator=g) * 2
    lengths = torch.randint(1, L + 1, (B,), generator=g)
    lengths[0] = L
    return phi, lengths


CASES = [dict(seed=0, W=3, C=2), dict(seed=1, W=1, C=3), dict(seed=2, W=4, C=1), dict(seed=3, W=8, C=2)]


@pytest.mark.parametrize("K", [1, 4, 50])
@pytest.mark.parametrize("case", CASES)
def test_log_z_marginals_kbest_match_enumeration(case, K):
    phi, lengths = problem(case["seed"], W=case["W"], C=case["C"])
    C = case["C"]
    log_z = log_partition(phi, lengths)
    m = marginals(phi, lengths)
    best = kbest(phi, lengths, K)
    assert torch.allclose(m.log_z, log_z)
    for b in range(phi.shape[0]):
        n = int(lengths[b])
        paths, scores = enumerate_sentence(phi[b], n)
        assert len(set(map(tuple, paths))) == len(paths)  # segmentations and IOB2 paths are one to one
        z = torch.logsumexp(scores, 0)
        assert math.isclose(float(log_z[b]), float(z), abs_tol=1e-9)
        probs = torch.exp(scores - z)
        expected = torch.zeros(n, bio_tags(C))
        for path, p in zip(paths, probs):
            expected[torch.arange(n), torch.tensor(path)] += p
        assert torch.allclose(m.tags[b, :n], expected, atol=1e-9)
        assert torch.allclose(m.tags[b, :n].sum(-1), torch.ones(n))
        assert float(m.tags[b, n:].abs().sum()) == 0.0
        order = torch.argsort(scores, descending=True)
        kept = min(K, len(paths))
        assert torch.allclose(best.scores[b, :kept], scores[order[:kept]])
        assert torch.allclose(best.log_probs[b, :kept], scores[order[:kept]] - z)
        for j in range(kept):
            got = best.paths[b, j, :n].tolist()
            assert got in paths
            assert math.isclose(float(scores[paths.index(got)]), float(best.scores[b, j]), abs_tol=1e-9)
            assert best.paths[b, j, n:].eq(-1).all()
        assert len({tuple(best.paths[b, j, :n].tolist()) for j in range(kept)}) == kept  # no duplicates
        assert not best.valid[b, kept:].any()
        assert best.paths[b, kept:].eq(-1).all()


def test_span_marginals_and_path_scores():
    phi, lengths = problem(7, W=3, C=2)
    m = marginals(phi, lengths)
    best = kbest(phi, lengths, 5)
    assert torch.allclose(path_scores(phi, lengths, best.paths[:, 0].clamp(min=0)), best.scores[:, 0])
    for b in range(phi.shape[0]):
        n = int(lengths[b])
        W, C = phi.shape[2], phi.shape[3]
        z = log_partition(phi[b : b + 1], lengths[b : b + 1])
        for i in range(n):
            for w in range(min(W, n - i)):
                for c in range(C):
                    total = [
                        float(s)
                        for seg, s in zip(segmentations(n, W, C), enumerate_sentence(phi[b], n)[1])
                        if (i, w, c) in seg
                    ]
                    expected = math.exp(torch.logsumexp(torch.tensor(total), 0) - z) if total else 0.0
                    assert math.isclose(float(m.spans[b, i, w, c]), expected, abs_tol=1e-9)


def test_wider_entities_than_the_model_scores_have_no_probability():
    phi = torch.zeros(1, 4, 2, 1)
    lengths = torch.tensor([4])
    three_words = torch.tensor([[1, 2, 2, 0]])  # B I I O: an entity of 3 words, W = 2
    assert path_scores(phi, lengths, three_words)[0] == float("-inf")
    assert path_scores(phi, lengths, torch.tensor([[2, 0, 0, 0]]))[0] == float("-inf")  # I- begins nothing


def test_bias_zero_is_the_independent_sigmoids_conditioned_on_flat_outputs():
    """(S1)-(S3) with b = 0, T = 1: p(y) is proportional to the product over every candidate
    (span, type) of sigmoid(l) if chosen, 1 - sigmoid(l) if not, over flat segmentations."""
    phi, lengths = problem(11, B=1, L=4, W=2, C=2)
    n, W, C = 4, 2, 2
    logits = phi[0]
    weights = []
    paths, scores = enumerate_sentence(logits, n)
    for seg in segmentations(n, W, C):
        chosen = {s for s in seg if s[2] >= 0}
        total = 0.0
        for i in range(n):
            for w in range(min(W, n - i)):
                for c in range(C):
                    p = torch.sigmoid(logits[i, w, c])
                    total += math.log(p if (i, w, c) in chosen else 1 - p)
        weights.append(total)
    weights = torch.tensor(weights)
    expected = torch.exp(weights - torch.logsumexp(weights, 0))
    got = torch.exp(scores - log_partition(phi, lengths)[0])
    assert torch.allclose(got, expected)


def test_tag_ids_follow_the_label_schema():
    schema = LabelSchema("IOB2", ("LOC", "PER"))
    assert schema.tags == ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")
    assert bio_tags(2) == schema.num_tags
