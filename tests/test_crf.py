"""The CRF engine against brute-force enumeration of every path."""

import itertools

import pytest
import torch

from seqdistill.cache_schema import LabelSchema
from seqdistill.crf import CRF, PAD_TAG, kbest, log_partition, marginals, nll, path_score, viterbi


@pytest.fixture(autouse=True)
def float64():
    """Exact comparisons in double precision; restored after each test."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _problem(seed, B=4, L=6, T=5, constraints=None):
    g = torch.Generator().manual_seed(seed)
    emissions = torch.randn(B, L, T, generator=g) * 2
    trans = torch.randn(T, T, generator=g)
    start, end = torch.randn(T, generator=g), torch.randn(T, generator=g)
    if constraints is not None:
        s_ok, t_ok, e_ok = (torch.as_tensor(a) for a in constraints)
        trans, start, end = (
            trans.masked_fill(~t_ok, float("-inf")),
            start.masked_fill(~s_ok, float("-inf")),
            end.masked_fill(~e_ok, float("-inf")),
        )
    lengths = torch.randint(1, L + 1, (B,), generator=g)
    lengths[0] = L
    mask = torch.arange(L)[None] < lengths[:, None]
    return emissions, mask, trans, start, end, lengths


def _enumerate(emissions, trans, start, end, n):
    """Scores of every path of length n of one sentence: (paths [P, n], scores [P])."""
    T = emissions.shape[-1]
    paths = torch.tensor(list(itertools.product(range(T), repeat=n)))
    scores = start[paths[:, 0]] + emissions[torch.arange(n), paths].sum(1) + end[paths[:, -1]]
    if n > 1:
        scores = scores + trans[paths[:, :-1], paths[:, 1:]].sum(1)
    return paths, scores


CASES = [
    dict(seed=0, T=5, constraints=None),
    dict(seed=1, T=3, constraints=None),
    dict(seed=2, T=5, constraints=LabelSchema("IOB2", ("A", "B")).allowed()),
    dict(seed=3, T=5, constraints=LabelSchema("BIOES", ("A",)).allowed()),
    dict(seed=4, T=3, constraints=LabelSchema("sBIO", ("A",)).allowed()),
]


@pytest.mark.parametrize("K", [3, 7])  # K < T (pruned candidates) and K >= T
@pytest.mark.parametrize("case", CASES)
def test_log_z_marginals_viterbi_kbest_match_enumeration(case, K):
    emissions, mask, trans, start, end, lengths = _problem(case["seed"], T=case["T"], constraints=case["constraints"])
    log_z = log_partition(emissions, mask, trans, start, end)
    marg = marginals(emissions, mask, trans, start, end)
    best_paths, best_scores = viterbi(emissions, mask, trans, start, end)
    kb = kbest(emissions, mask, trans, start, end, K)
    for b, n in enumerate(lengths.tolist()):
        paths, scores = _enumerate(emissions[b, :n], trans, start, end, n)
        ref_z = torch.logsumexp(scores, 0)
        assert log_z[b].item() == pytest.approx(ref_z.item(), abs=1e-5)
        probs = torch.exp(scores - ref_z)
        ref_marg = torch.zeros(n, case["T"])
        for t in range(n):
            ref_marg[t].index_add_(0, paths[:, t], probs)
        torch.testing.assert_close(marg[b, :n], ref_marg, atol=1e-5, rtol=0)
        assert marg[b, n:].abs().sum() == 0
        order = torch.argsort(scores, descending=True)
        n_valid = int(torch.isfinite(scores).sum())
        assert best_scores[b].item() == pytest.approx(scores[order[0]].item(), abs=1e-5)
        assert best_paths[b, :n].tolist() == paths[order[0]].tolist()
        assert (best_paths[b, n:] == PAD_TAG).all()
        for r in range(K):
            if r < n_valid:
                assert kb.valid[b, r]
                assert kb.scores[b, r].item() == pytest.approx(scores[order[r]].item(), abs=1e-5)
                assert kb.paths[b, r, :n].tolist() == paths[order[r]].tolist()
                assert kb.log_probs[b, r].item() == pytest.approx((scores[order[r]] - ref_z).item(), abs=1e-5)
            else:  # fewer valid paths than K: the rest are marked invalid, never invented
                assert not kb.valid[b, r] and kb.log_probs[b, r] == float("-inf")
                assert (kb.paths[b, r] == PAD_TAG).all()
        residual = 1 - kb.log_probs[b].exp().sum()
        assert residual.item() == pytest.approx(1 - probs[order[:K]].sum().item(), abs=1e-6)
        assert residual >= -1e-9


def test_constrained_kbest_never_returns_an_invalid_sequence():
    schema = LabelSchema("IOB2", ("A", "B"))
    crf = CRF.from_schema(schema)
    with torch.no_grad():
        crf.transitions.normal_()
        crf.start.normal_()
    emissions, mask, *_ = _problem(5, B=8, L=6, T=schema.num_tags)
    kb = crf.kbest(emissions, mask, 20)
    from seqdistill.cache_schema.labels import check_sequence

    for b in range(8):
        n = int(mask[b].sum())
        for r in range(20):
            if kb.valid[b, r]:
                assert check_sequence(schema.decode(kb.paths[b, r, :n].tolist()), "IOB2") is None
    # length-1 sentences of IOB2 over two types have exactly 3 valid paths: O, B-A, B-B
    one = crf.kbest(torch.randn(1, 1, 5), torch.ones(1, 1, dtype=torch.bool), 5)
    assert one.valid[0].tolist() == [True, True, True, False, False]


def test_nll_and_path_score():
    emissions, mask, trans, start, end, lengths = _problem(6, T=4)
    g = torch.Generator().manual_seed(1)
    tags = torch.randint(0, 4, mask.shape, generator=g).masked_fill(~mask, PAD_TAG)
    got = nll(emissions, mask, tags, trans, start, end)
    for b, n in enumerate(lengths.tolist()):
        y = tags[b, :n]
        s = start[y[0]] + emissions[b, torch.arange(n), y].sum() + end[y[-1]]
        s = s + sum(trans[y[i - 1], y[i]] for i in range(1, n))
        assert path_score(emissions, mask, tags, trans, start, end)[b].item() == pytest.approx(s.item(), abs=1e-9)
        paths, scores = _enumerate(emissions[b, :n], trans, start, end, n)
        assert got[b].item() == pytest.approx((torch.logsumexp(scores, 0) - s).item(), abs=1e-6)


def test_gradcheck_log_partition():
    emissions, mask, trans, start, end, _ = _problem(7, B=3, L=4, T=3)
    args = [x.clone().requires_grad_(True) for x in (emissions, trans, start, end)]
    assert torch.autograd.gradcheck(lambda e, a, s, t: log_partition(e, mask, a, s, t), args)


def test_gradient_of_log_z_is_the_marginal():
    emissions, mask, trans, start, end, _ = _problem(8, T=5, constraints=LabelSchema("IOB2", ("A", "B")).allowed())
    e = emissions.clone().requires_grad_(True)
    log_partition(e, mask, trans, start, end).sum().backward()
    assert torch.isfinite(e.grad).all()
    torch.testing.assert_close(e.grad, marginals(emissions, mask, trans, start, end), atol=1e-8, rtol=0)


def test_float32_under_autocast_and_half_inputs():
    emissions, mask, trans, start, end, _ = _problem(9, T=5)
    ref = log_partition(emissions, mask, trans, start, end)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = log_partition(emissions.float().to(torch.bfloat16), mask, trans.float(), start.float(), end.float())
        kb = kbest(emissions.float(), mask, trans.float(), start.float(), end.float(), 3)
    assert got.dtype == torch.float32 and kb.scores.dtype == torch.float32
    torch.testing.assert_close(got.double(), ref, atol=0.2, rtol=0.01)  # input rounded to bf16
    assert kb.paths.shape == (4, 3, 6)


def test_log_z_computed_once_is_the_same_log_z():
    """The build computes log Z once, in the marginals' forward pass, and hands it to k-best and
    the gold NLL: the values are those each computes alone, bit for bit."""
    em, mask, trans, start, end, _ = _problem(7, B=5, L=7, T=6)
    probs, log_z = marginals(em, mask, trans, start, end, with_log_z=True)
    assert torch.equal(probs, marginals(em, mask, trans, start, end))
    assert torch.equal(log_z, log_partition(em, mask, trans, start, end))
    shared, alone = kbest(em, mask, trans, start, end, 4, log_z=log_z), kbest(em, mask, trans, start, end, 4)
    assert torch.equal(shared.log_probs, alone.log_probs) and torch.equal(shared.paths, alone.paths)
    tags = alone.paths[:, 0].clamp(min=0)
    assert torch.equal(nll(em, mask, tags, trans, start, end, log_z=log_z), nll(em, mask, tags, trans, start, end))


@pytest.mark.parametrize("K", [1, 3, 8])
def test_unmasked_steps_give_the_same_values(K):
    """Steps before the shortest sentence ends skip the mask: counted on a CPU, given by the build
    (``shortest``, from the words), or none at all (0, a GPU that was told nothing). All give the
    same marginals, log Z and paths, bit for bit; the paths are those of brute force (above)."""
    em, mask, trans, start, end, lengths = _problem(11, B=6, L=8, T=5)
    lengths[1:] = torch.clamp(lengths[1:], min=5)  # a long run of steps where every sentence runs
    mask = torch.arange(8)[None] < lengths[:, None]
    shortest = int(lengths.min())
    ref_probs, ref_z = marginals(em, mask, trans, start, end, with_log_z=True)
    ref_best = kbest(em, mask, trans, start, end, K)
    for given in (None, shortest, 0):
        probs, z = marginals(em, mask, trans, start, end, with_log_z=True, shortest=given)
        best = kbest(em, mask, trans, start, end, K, shortest=given)
        assert torch.equal(probs, ref_probs) and torch.equal(z, ref_z)
        assert torch.equal(best.paths, ref_best.paths) and torch.equal(best.scores, ref_best.scores)


def test_a_batch_knows_its_shortest_sentence_on_the_host():
    from transformers import BertTokenizerFast

    from seqdistill.tokenization import WordTokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b", "##b"]
    tok = BertTokenizerFast(vocab_file=None, vocab={w: i for i, w in enumerate(vocab)})
    batch = WordTokenizer(tok, max_length=16)([["a", "bb", "a"], ["b"], ["a", "a"]])
    assert batch.shortest == 1 and batch.to("cpu").shortest == 1
