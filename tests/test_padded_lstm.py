"""``padded_lstm.bilstm`` against the packed ``nn.LSTM`` it replaces in training: the same outputs on
every real step, zero past each length, the same gradients for the module's own parameters."""

import pytest
import torch
from torch import nn

from seqdistill.students.padded_lstm import bilstm


def packed(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The reference: packed over the non-empty sentences, zero rows for empty ones."""
    seq = nn.utils.rnn.pack_padded_sequence(x, lengths.clamp(min=1), batch_first=True, enforce_sorted=False)
    h = nn.utils.rnn.pad_packed_sequence(lstm(seq)[0], batch_first=True, total_length=x.shape[1])[0]
    return h * (lengths > 0).view(-1, 1, 1)


@pytest.mark.parametrize("layers,bias", [(1, True), (2, True), (1, False)])
def test_outputs_and_gradients_match_packing(layers, bias):
    torch.manual_seed(0)
    lstm = nn.LSTM(7, 5, num_layers=layers, bias=bias, bidirectional=True, batch_first=True)
    lengths = torch.tensor([4, 1, 6, 3, 0])  # unsorted, one full, one empty
    x = torch.randn(5, 6, 7, requires_grad=True)
    want, got = packed(lstm, x, lengths), bilstm(lstm, x, lengths)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    # padding: exactly zero, as pad_packed_sequence leaves it
    pad = torch.arange(6).unsqueeze(0) >= lengths.unsqueeze(1)
    assert got[pad].abs().max() == 0
    weights = torch.randn_like(want)
    params = [x, *lstm.parameters()]
    for g_want, g_got in zip(
        torch.autograd.grad((want * weights).sum(), params), torch.autograd.grad((got * weights).sum(), params)
    ):
        torch.testing.assert_close(g_got, g_want, rtol=1e-5, atol=1e-6)


def test_padding_never_reaches_a_real_step():
    """What packing guaranteed: changing the padding's values moves no real output."""
    torch.manual_seed(1)
    lstm = nn.LSTM(3, 4, bidirectional=True, batch_first=True)
    lengths = torch.tensor([2, 5])
    x = torch.randn(2, 5, 3)
    noisy = x.clone()
    noisy[0, 2:] = 100.0
    torch.testing.assert_close(bilstm(lstm, noisy, lengths), bilstm(lstm, x, lengths))


def test_dropout_between_layers_only_in_training():
    torch.manual_seed(2)
    lstm = nn.LSTM(3, 4, num_layers=2, dropout=0.5, bidirectional=True, batch_first=True)
    x, lengths = torch.randn(3, 4, 3), torch.tensor([4, 2, 3])
    lstm.eval()
    torch.testing.assert_close(bilstm(lstm, x, lengths), packed(lstm, x, lengths), rtol=1e-5, atol=1e-6)
    lstm.train()
    torch.manual_seed(3)
    first = bilstm(lstm, x, lengths)
    torch.manual_seed(4)
    assert not torch.allclose(first, bilstm(lstm, x, lengths))


def test_refuses_what_it_does_not_run():
    with pytest.raises(ValueError, match="bidirectional"):
        bilstm(nn.LSTM(3, 4, batch_first=True), torch.randn(1, 2, 3), torch.tensor([2]))
