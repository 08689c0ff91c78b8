"""SRU and SRU++ layers (issue 9): the recurrence by hand, padding, directions, no length limit."""

import math

import pytest
import torch

from seqdistill.students.sru import BiSRU, BiSRUpp, recurrent_stack, sru_recurrence


def _sig(x):
    return 1 / (1 + math.exp(-x))


def test_recurrence_by_hand():
    # one unit, two steps: u = (x~, f^, r^), highway input x
    u = torch.tensor([[[[0.5], [0.2], [-0.3]], [[-1.0], [0.4], [0.1]]]])  # [B=1, T=2, 3, H=1]
    x = torch.tensor([[[0.7], [0.1]]])
    v_f, v_r, b_f, b_r = torch.tensor([0.3]), torch.tensor([-0.2]), torch.tensor([0.1]), torch.tensor([0.05])
    out = sru_recurrence(u, x, torch.ones(1, 2, dtype=torch.bool), v_f, v_r, b_f, b_r)
    c = 0.0
    want = []
    for (xt, fh, rh), xh in zip([(0.5, 0.2, -0.3), (-1.0, 0.4, 0.1)], [0.7, 0.1]):
        f = _sig(fh + 0.3 * c + 0.1)
        r = _sig(rh - 0.2 * c + 0.05)
        c = f * c + (1 - f) * xt
        want.append(r * c + (1 - r) * xh)
    assert out[0, :, 0].tolist() == pytest.approx(want, rel=1e-6)
    # backwards: the same as forwards over the reversed sequence
    back = sru_recurrence(u, x, torch.ones(1, 2, dtype=torch.bool), v_f, v_r, b_f, b_r, reverse=True)
    fwd_rev = sru_recurrence(u.flip(1), x.flip(1), torch.ones(1, 2, dtype=torch.bool), v_f, v_r, b_f, b_r)
    torch.testing.assert_close(back, fwd_rev.flip(1))


@pytest.mark.parametrize("cell", ["sru", "sru++", "lstm"])
def test_padding_changes_nothing_of_the_real_words(cell):
    torch.manual_seed(0)
    stack = recurrent_stack(cell, 6, 4, 2)
    for layer in stack:
        if hasattr(layer, "alpha"):
            torch.nn.init.constant_(layer.alpha, 0.7)  # attention on
    x = torch.randn(2, 5, 6)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)

    def run(x, mask):
        h = x
        for layer in stack:
            h = layer(h, mask)
        return h

    both = run(x, mask)
    alone = run(x[1:, :3], mask[1:, :3])
    torch.testing.assert_close(both[1:, :3], alone, rtol=1e-5, atol=1e-6)
    if cell != "lstm":
        assert (both[1, 3:] == 0).all()
    assert both.shape == (2, 5, 8)  # both directions


def test_sru_pp_attention_starts_off_and_learns():
    torch.manual_seed(0)
    layer = BiSRUpp(6, 4)
    x, mask = torch.randn(1, 4, 6), torch.ones(1, 4, dtype=torch.bool)
    u = layer.projections(x, mask)
    torch.testing.assert_close(u, layer.o(layer.norm(layer.q(x))))  # alpha = 0: no attention yet
    layer(x, mask).sum().backward()
    assert layer.alpha.grad is not None and layer.alpha.grad.abs() > 0


def test_no_length_limit():
    layer = BiSRUpp(8, 4)
    with torch.no_grad():
        out = layer(torch.randn(1, 5000, 8), torch.ones(1, 5000, dtype=torch.bool))
    assert out.shape == (1, 5000, 8) and torch.isfinite(out).all()


def test_both_directions_in_one_pass_equal_two_passes():
    torch.manual_seed(0)
    layer = BiSRU(6, 4)
    x = torch.randn(2, 5, 6)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    u = layer.W(x).view(2, 5, 2, 3, 4)
    hx = layer.highway(x)
    f = sru_recurrence(u[:, :, 0], hx, mask, layer.fwd.v_f, layer.fwd.v_r, layer.fwd.b_f, layer.fwd.b_r)
    b = sru_recurrence(u[:, :, 1], hx, mask, layer.bwd.v_f, layer.bwd.v_r, layer.bwd.b_f, layer.bwd.b_r, reverse=True)
    torch.testing.assert_close(layer(x, mask), torch.cat([f, b], -1))


def test_recurrence_takes_float_masks_half_inputs_and_empty_sequences():
    from seqdistill.students.sru import sru_recurrence

    torch.manual_seed(0)
    u, hx = torch.randn(2, 4, 3, 5), torch.randn(2, 4, 5)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    v = [torch.randn(5) for _ in range(4)]
    want = sru_recurrence(u, hx, mask, *v)
    assert torch.equal(sru_recurrence(u, hx, mask.float(), *v), want)
    half = sru_recurrence(u.bfloat16(), hx.bfloat16(), mask, *v)
    assert half.dtype == torch.bfloat16 and torch.allclose(half.float(), want, atol=0.1)
    assert sru_recurrence(u[:, :0], hx[:, :0], mask[:, :0], *v).shape == (2, 0, 5)


@pytest.mark.parametrize("cell", [BiSRU, BiSRUpp])
def test_the_exported_scan_gives_the_layers_outputs_at_every_length(tmp_path, cell):
    """The ONNX graph of a layer (``ExportSRU``: the recurrence as a ``Scan``, both directions
    stacked) against the torch layer, one graph over several lengths, with shorter sentences
    padded in the batch."""
    import onnxruntime as ort

    from seqdistill.students.sru import ExportSRU, replace_sru_scans

    torch.manual_seed(0)
    layer = cell(6, 5).eval()
    for d in (layer.fwd, layer.bwd):  # biases away from zero, so that a wrong one shows
        torch.nn.init.uniform_(d.b_f, -1, 1)
        torch.nn.init.uniform_(d.b_r, -1, 1)
    path = tmp_path / "sru.onnx"
    x, mask = torch.randn(2, 4, 6), torch.ones(2, 4, dtype=torch.bool)
    torch.onnx.export(
        ExportSRU(layer),
        (x, mask),
        str(path),
        dynamo=False,
        input_names=["x", "mask"],
        output_names=["h"],
        dynamic_axes={"x": {0: "b", 1: "t"}, "mask": {0: "b", 1: "t"}, "h": {0: "b", 1: "t"}},
        opset_version=17,
        custom_opsets={"seqdistill": 1},
    )
    replace_sru_scans(path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for T in (1, 2, 5, 13):
        x = torch.randn(3, T, 6)
        mask = torch.arange(T).unsqueeze(0) < torch.tensor([[T], [max(1, T - 2)], [1]])
        with torch.no_grad():
            expected = layer(x, mask)
        (got,) = session.run(None, {"x": x.numpy(), "mask": mask.numpy()})
        assert got.shape == (3, T, 10)
        real = mask.numpy()
        torch.testing.assert_close(torch.from_numpy(got[real]), expected[mask], atol=1e-5, rtol=1e-5)
        assert not got[~real].any()  # padding outputs zeros, as the torch layer's
