"""SRU and SRU++ layers in plain torch (issue 9; paper 003 uses both as students' recurrent part).

SRU (Lei et al., 2017/2018, "Simple Recurrent Units for Highly Parallelizable Recurrence"): all
matrix products are computed for the whole sequence at once; only an elementwise recurrence runs
step by step:

    [x~_t, f^_t, r^_t] = W x_t                       (one matmul over every t)
    f_t = sigmoid(f^_t + v_f * c_{t-1} + b_f)
    c_t = f_t * c_{t-1} + (1 - f_t) * x~_t
    r_t = sigmoid(r^_t + v_r * c_{t-1} + b_r)
    h_t = r_t * c_t + (1 - r_t) * x'_t                (highway; x'_t = x_t, or W_h x_t when the
                                                        input width differs from the hidden width)

SRU++ (Lei, 2021, "When Attention Meets Fast Recurrence"): the matmul ``W x_t`` is replaced by an
attention sub-layer over the whole sequence,

    Q = W_q X  (width d' = hidden / 4, at least 8),  K = W_k Q,  V = W_v Q
    A = softmax(Q K^T / sqrt(d')) V
    U = W_o LayerNorm(Q + alpha * A)                  (alpha a learned scalar, 0 at the start)

and U takes the place of ``W x`` in the recurrence above. Attention here is bidirectional (a
tagger sees the whole sentence) and masked on padding.

Bidirectional layers run the recurrence forwards and backwards with separate parameters and
concatenate the two directions (width 2 x hidden), as the paper's "4 bidirectional SRU layers".
The recurrence is a Python loop over time with batch x hidden elementwise work per step (the
authors' CUDA kernel fuses it); it has no length limit.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor, nn

from .padded_lstm import bilstm

CELLS = ("lstm", "sru", "sru++")


def sru_recurrence(
    u: Tensor,
    x_highway: Tensor,
    mask: Tensor,
    v_f: Tensor,
    v_r: Tensor,
    b_f: Tensor,
    b_r: Tensor,
    reverse: bool = False,
) -> Tensor:
    """The elementwise SRU recurrence (equations in the module docstring). ``u [B, T, 3, H]`` holds
    (x~, f^, r^) for every step, ``x_highway [B, T, H]``, ``mask [B, T]``, the vectors ``[H]`` or
    per row ``[B, H]``. Padding steps keep the state unchanged and output zeros; ``reverse`` runs
    from the last position to the first.

    Written for few operations per step (at batch 1 the per-operation overhead, not arithmetic,
    is the cost): the biases are added and the inputs split into per-step views before the loop,
    ``c_t = f c + (1 - f) x~`` and the highway are one ``lerp`` each, the mask one ``where``, and
    the padding is zeroed once at the end: 7 operations a step."""
    Bsz, T, _, H = u.shape
    if T == 0:
        return u.new_zeros(Bsz, 0, H)
    mask = mask.bool()
    v_f, v_r, b_f, b_r = (p.to(u.dtype) for p in (v_f, v_r, b_f, b_r))  # lerp does not promote dtypes
    x_highway = x_highway.to(u.dtype)
    if reverse:
        u, x_highway, mask = u.flip(1), x_highway.flip(1), mask.flip(1)
    xs = u[:, :, 0].unbind(1)
    fs = (u[:, :, 1] + b_f.unsqueeze(-2)).unbind(1)
    rs = (u[:, :, 2] + b_r.unsqueeze(-2)).unbind(1)
    highway = x_highway.unbind(1)
    keep = mask.unsqueeze(-1).unbind(1)
    c = u.new_zeros(Bsz, H)
    out = []
    for t in range(T):
        f = torch.sigmoid(torch.addcmul(fs[t], v_f, c))
        r = torch.sigmoid(torch.addcmul(rs[t], v_r, c))
        c_new = torch.lerp(xs[t], c, f)  # f * c + (1 - f) * x~
        out.append(torch.lerp(highway[t], c_new, r))  # r * c_t + (1 - r) * x'
        c = torch.where(keep[t], c_new, c)
    h = torch.stack(out, 1) * mask.unsqueeze(-1).to(u.dtype)
    return h.flip(1) if reverse else h


class _Direction(nn.Module):
    """The recurrence parameters of one direction."""

    def __init__(self, hidden: int):
        super().__init__()
        self.v_f, self.v_r = nn.Parameter(torch.zeros(hidden)), nn.Parameter(torch.zeros(hidden))
        self.b_f, self.b_r = nn.Parameter(torch.zeros(hidden)), nn.Parameter(torch.zeros(hidden))
        nn.init.uniform_(self.v_f, -0.5, 0.5)
        nn.init.uniform_(self.v_r, -0.5, 0.5)


class BiSRU(nn.Module):
    """One bidirectional SRU layer: ``[B, T, input]`` -> ``[B, T, 2 * hidden]``."""

    def __init__(self, input_size: int, hidden: int):
        super().__init__()
        self.hidden = hidden
        self.W = nn.Linear(input_size, 2 * 3 * hidden, bias=False)  # both directions' (x~, f^, r^)
        self.highway = nn.Identity() if input_size == hidden else nn.Linear(input_size, hidden, bias=False)
        self.fwd, self.bwd = _Direction(hidden), _Direction(hidden)

    def projections(self, x: Tensor, mask: Tensor) -> Tensor:
        return self.W(x)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """Both directions in one pass of the recurrence: the backward one runs forwards over the
        time-reversed sequence, stacked on the batch (padding, then first at the front, only
        keeps the state at zero), which halves the steps taken one at a time."""
        Bsz, T, _ = x.shape
        u = self.projections(x, mask).view(Bsz, T, 2, 3, self.hidden)
        hx = self.highway(x)
        both = sru_recurrence(
            torch.cat([u[:, :, 0], u[:, :, 1].flip(1)]),
            torch.cat([hx, hx.flip(1)]),
            torch.cat([mask, mask.flip(1)]),
            *(
                torch.stack([getattr(self.fwd, k), getattr(self.bwd, k)]).repeat_interleave(Bsz, 0)
                for k in ("v_f", "v_r", "b_f", "b_r")
            ),
        )
        return torch.cat([both[:Bsz], both[Bsz:].flip(1)], -1)


class BiSRUpp(BiSRU):
    """One bidirectional SRU++ layer: attention in place of the SRU's input matmul."""

    def __init__(self, input_size: int, hidden: int, attention_size: int | None = None):
        super().__init__(input_size, hidden)
        d = attention_size or max(8, hidden // 4)  # d' = hidden / 4 (at least 8: a LayerNorm over fewer is degenerate)
        del self.W
        self.q = nn.Linear(input_size, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.norm = nn.LayerNorm(d)
        self.alpha = nn.Parameter(torch.zeros(()))
        self.o = nn.Linear(d, 2 * 3 * hidden, bias=False)

    def projections(self, x: Tensor, mask: Tensor) -> Tensor:
        q = self.q(x)
        k, v = self.k(q), self.v(q)
        scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
        a = torch.softmax(scores, -1) @ v
        return self.o(self.norm(q + self.alpha * a))


class BiLSTMLayer(nn.Module):
    """A bidirectional LSTM layer with the same interface (``padded_lstm.bilstm``: padding never
    reaches a real step)."""

    def __init__(self, input_size: int, hidden: int):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden, bidirectional=True, batch_first=True)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        return bilstm(self.lstm, x, mask.sum(1))


def recurrent_stack(cell: str, input_size: int, hidden: int, layers: int) -> nn.ModuleList:
    """``layers`` bidirectional layers of ``cell``; layer i > 0 reads the 2 x hidden output of i-1
    (the caller applies dropout between them)."""
    if cell not in CELLS:
        raise ValueError(f"cell {cell!r} is not one of {', '.join(CELLS)}")
    make = {"lstm": BiLSTMLayer, "sru": BiSRU, "sru++": BiSRUpp}[cell]
    return nn.ModuleList(make(input_size if i == 0 else 2 * hidden, hidden) for i in range(layers))


# -- the SRU recurrence in ONNX (``distill-export``; RNNTagger.export_graph) -----------------------------
class SRUScan(torch.autograd.Function):
    """The SRU recurrence (:func:`sru_recurrence`) time-major (``[T, N, H]``, ``keep
    [T, N, 1]``, the biases already in f^ and r^) as one node of the exported graph: the TorchScript exporter writes it as a
    ``seqdistill::SRUScan`` placeholder, which :func:`replace_sru_scans` turns into an ONNX ``Scan``
    whose body is the 13 operations of one step (a scripted loop would export as a ``Loop`` of
    about 25 operations a step, writing its output with a ``ScatterND`` that copies it whole)."""

    @staticmethod
    def forward(ctx, xs, fs, rs, highway, keep, v_f, v_r):
        zero = torch.zeros_like(v_f)
        u = torch.stack([xs, fs, rs], 2).transpose(0, 1)  # [N, T, 3, H]
        return sru_recurrence(u, highway.transpose(0, 1), keep[..., 0].transpose(0, 1), v_f, v_r, zero, zero).transpose(
            0, 1
        )

    @staticmethod
    def symbolic(g, xs, fs, rs, highway, keep, v_f, v_r):
        out = g.op("seqdistill::SRUScan", xs, fs, rs, highway, keep, v_f, v_r)
        out.setType(xs.type())
        return out


def sru_scan_body(v_f: str, v_r: str):
    """One SRU step as an ONNX graph (state ``c``; scan inputs x~, f^, r^, x', keep; ``v_f`` and
    ``v_r`` read from the outer graph): outputs the new state and h_t."""
    from onnx import TensorProto, helper

    n = helper.make_node
    nodes = [
        n("Mul", [v_f, "c"], ["fc"]),
        n("Add", ["f_in", "fc"], ["f_pre"]),
        n("Sigmoid", ["f_pre"], ["f"]),
        n("Mul", [v_r, "c"], ["rc"]),
        n("Add", ["r_in", "rc"], ["r_pre"]),
        n("Sigmoid", ["r_pre"], ["r"]),
        n("Sub", ["c", "x"], ["cx"]),
        n("Mul", ["f", "cx"], ["fcx"]),
        n("Add", ["x", "fcx"], ["c_new"]),
        n("Sub", ["c_new", "hw"], ["ch"]),
        n("Mul", ["r", "ch"], ["rch"]),
        n("Add", ["hw", "rch"], ["h"]),
        n("Where", ["keep", "c_new", "c"], ["c_out"]),
    ]
    f32 = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(name, f32, None) for name in ("c", "x", "f_in", "r_in", "hw")]
    inputs.append(helper.make_tensor_value_info("keep", TensorProto.BOOL, None))
    outputs = [helper.make_tensor_value_info("c_out", f32, None), helper.make_tensor_value_info("h", f32, None)]
    return helper.make_graph(nodes, "sru_step", inputs, outputs)


def replace_sru_scans(path: Path) -> None:
    """Turn every ``seqdistill::SRUScan`` placeholder of the ONNX file into a standard ``Scan``
    over time (its initial state zeros of one step's shape), in place."""
    import onnx
    from onnx import helper

    model = onnx.load(str(path))
    graph = model.graph
    nodes = []
    replaced = set()
    for i, node in enumerate(graph.node):
        if node.domain != "seqdistill":
            nodes.append(node)
            continue
        xs, fs, rs, hw, keep, v_f, v_r = node.input
        step_shape, c0 = f"sru{i}_step_shape", f"sru{i}_c0"
        nodes.append(helper.make_node("Shape", [xs], [step_shape], start=1))
        nodes.append(
            helper.make_node(
                "ConstantOfShape",
                [step_shape],
                [c0],
                value=helper.make_tensor("zero", onnx.TensorProto.FLOAT, [1], [0.0]),
            )
        )
        nodes.append(
            helper.make_node(
                "Scan",
                [c0, xs, fs, rs, hw, keep],
                [f"sru{i}_c_last", node.output[0]],
                body=sru_scan_body(v_f, v_r),
                num_scan_inputs=5,
            )
        )
        replaced.add(node.output[0])
    graph.ClearField("node")
    graph.node.extend(nodes)
    kept = [v for v in graph.value_info if v.name not in replaced]  # shapes the tracer fixed for one example
    graph.ClearField("value_info")
    graph.value_info.extend(kept)
    opsets = [o for o in model.opset_import if o.domain != "seqdistill"]
    model.ClearField("opset_import")
    model.opset_import.extend(opsets)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


class ExportSRU(nn.Module):
    """A ``BiSRU``/``BiSRUpp`` layer's forward with the recurrence as one ``SRUScan`` (both directions
    stacked on the batch, the backward one time-reversed, as ``BiSRU.forward``)."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        layer = self.layer
        B, T, H = x.shape[0], x.shape[1], layer.hidden
        u = layer.projections(x, mask).view(B, T, 2, 3, H)
        hx = layer.highway(x)
        u = torch.cat([u[:, :, 0], u[:, :, 1].flip(1)])  # [2B, T, 3, H]
        both_mask = torch.cat([mask, mask.flip(1)])
        params = {
            k: torch.stack([getattr(layer.fwd, k), getattr(layer.bwd, k)]).repeat_interleave(B, 0)
            for k in ("v_f", "v_r", "b_f", "b_r")
        }
        fs = u[:, :, 1] + params["b_f"].unsqueeze(1)
        rs = u[:, :, 2] + params["b_r"].unsqueeze(1)
        h = SRUScan.apply(
            u[:, :, 0].transpose(0, 1),
            fs.transpose(0, 1),
            rs.transpose(0, 1),
            torch.cat([hx, hx.flip(1)]).transpose(0, 1),
            both_mask.transpose(0, 1).unsqueeze(-1),
            params["v_f"],
            params["v_r"],
        ).transpose(0, 1)
        h = h * both_mask.unsqueeze(-1).to(h.dtype)
        return torch.cat([h[:B], h[B:].flip(1)], -1)
