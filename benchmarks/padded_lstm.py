"""The students' bidirectional LSTM in training: packed (``pack_padded_sequence``, what the students
ran before) against ``padded_lstm.bilstm`` (each direction over the padded batch), forward and
backward, on batches cut from a real cache the way ``CacheStream`` cuts them.

    .venv/bin/python benchmarks/padded_lstm.py --cache .data/headlines/cache \
        --tokenizer .data/models/all-mpnet-base-v2 --write docs/BENCHMARKS.md

Two settings, each at its recipe's defaults:
* XtremeDistil's student (``distill-train xtremedistil``, paper 001's E = 50, H = 2 x 200): batches of
  512 sentences of the teacher's subwords;
* paper 000's BiLSTM-CRF (``distill-train mgkd --arch bilstm-crf --chars``): batches of 32 sentences
  of words, each word the teacher's 768 dimensions and 30 character filters, H = 2 x 300.

Batches: every training row of the cache (gold and unlabelled), shuffled with a fixed seed, sorted by
length within each buffer of 4,096 and cut into batches, as the stream does; ``--batches N`` of them
drawn at random. The inputs are random (the time of an LSTM does not depend on its values). The two
ways alternate batch by batch, so the machine's drift falls on both; the sum over the drawn batches
and its ratio are reported, with the largest difference between the two ways' outputs (real steps)
and gradients (relative to the largest gradient).
"""

from __future__ import annotations

import argparse
import glob
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from seqdistill.students.padded_lstm import bilstm  # noqa: E402

SETTINGS = {  # name: (sentences a batch, input width, hidden per direction, unit)
    "xtremedistil": (512, 50, 200, "subwords"),
    "bilstm-crf": (32, 768 + 30, 300, "words"),
}


def packed(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    seq = nn.utils.rnn.pack_padded_sequence(x, lengths.clamp(min=1), batch_first=True, enforce_sorted=False)
    return nn.utils.rnn.pad_packed_sequence(lstm(seq)[0], batch_first=True, total_length=x.shape[1])[0]


def lengths_of(cache: Path, tokenizer) -> dict[str, np.ndarray]:
    files = sorted(glob.glob(str(cache / "layers" / "examples" / "**" / "*.parquet"), recursive=True))
    if not files:
        raise SystemExit(f"{cache}: no examples layer (layers/examples/*/records.parquet); is it a cache?")
    table = pa.concat_tables(pq.read_table(f, columns=["split", "words"]) for f in files)
    rows = [w for w, s in zip(table["words"].to_pylist(), table["split"].to_pylist()) if s in ("train", "unlabelled")]
    words = np.array([len(w) for w in rows])
    pieces = tokenizer(rows, is_split_into_words=True, add_special_tokens=True)["input_ids"]
    return {"words": words, "subwords": np.array([len(p) for p in pieces])}


def stream_batches(n: np.ndarray, size: int, seed: int = 0, buffer: int = 4096) -> list[np.ndarray]:
    order = np.random.default_rng(seed).permutation(len(n))
    out = []
    for i in range(0, len(order), buffer):
        chunk = np.sort(n[order[i : i + buffer]])
        out += [chunk[j : j + size] for j in range(0, len(chunk), size)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--tokenizer", required=True, help="the teacher's tokenizer (a local dir or hub name)")
    ap.add_argument("--batches", type=int, default=24, help="batches drawn per setting")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--write", help="docs/BENCHMARKS.md: write the section there")
    args = ap.parse_args()
    from transformers import AutoTokenizer

    torch.set_num_threads(args.threads)
    lengths = lengths_of(args.cache, AutoTokenizer.from_pretrained(args.tokenizer))
    rng = np.random.default_rng(1)
    rows = []
    for name, (size, width, hidden, unit) in SETTINGS.items():
        torch.manual_seed(0)
        lstm = nn.LSTM(width, hidden, bidirectional=True, batch_first=True)
        all_batches = stream_batches(lengths[unit], size)
        drawn = [all_batches[i] for i in rng.choice(len(all_batches), min(args.batches, len(all_batches)), False)]
        seconds = {"packed": 0.0, "padded": 0.0}
        out_diff = grad_diff = 0.0
        for lens in drawn:
            n = torch.as_tensor(lens)
            x = torch.randn(len(lens), int(n.max()), width, requires_grad=True)
            real = (torch.arange(x.shape[1]).unsqueeze(0) < n.unsqueeze(1)).unsqueeze(-1)
            results = {}
            for way, run in (("packed", packed), ("padded", bilstm)):
                start = time.perf_counter()
                h = run(lstm, x, n) * real
                grads = torch.autograd.grad(h.pow(2).sum(), [x, *lstm.parameters()])
                seconds[way] += time.perf_counter() - start
                results[way] = (h.detach(), grads)
            (a, ga), (b, gb) = results["packed"], results["padded"]
            out_diff = max(out_diff, float((a - b).abs().max()))
            grad_diff = max(grad_diff, max(float((u - v).abs().max() / u.abs().max()) for u, v in zip(ga, gb)))
        median = int(np.median([len(b) * b.max() for b in drawn]))
        rows.append(
            f"| {name}: {size} sentences of {unit}, {width} -> 2 x {hidden} | {len(all_batches):,} | {len(drawn)} "
            f"| {median:,} | {seconds['packed']:.2f} | {seconds['padded']:.2f} "
            f"| {seconds['packed'] / seconds['padded']:.2f}x | {out_diff:.1e} / {grad_diff:.1e} |"
        )
        print(rows[-1], flush=True)

    from doc_section import write_section
    from serve_load import machine

    BEGIN, END = "<!-- padded_lstm:begin -->", "<!-- padded_lstm:end -->"
    text = "\n".join(
        [
            BEGIN,
            "",
            f"Command: `.venv/bin/python benchmarks/padded_lstm.py {' '.join(sys.argv[1:])}`",
            "",
            f"Data: the training rows of `{args.cache}` ({len(lengths['words']):,} sentences, gold and unlabelled), "
            f"cut into batches as the cache stream cuts them. Machine: {machine()}, {torch.get_num_threads()} torch "
            f"thread(s); the two ways alternate batch by batch; random inputs and weights. Time: forward and backward "
            f"of the LSTM alone, summed over the drawn batches.",
            "",
            "| setting | batches an epoch | drawn | padded steps a batch (median) | packed, s | padded, s "
            "| packed / padded | largest difference: outputs / gradients (relative) |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
            *rows,
            "",
            END,
        ]
    )
    print(text)
    if args.write:
        write_section(args.write, BEGIN, END, "## The students' BiLSTM without packing", text)


if __name__ == "__main__":
    main()
