"""k-best Viterbi throughput: the batched engine against a per-sentence loop.

    .venv/bin/python benchmarks/kbest_throughput.py [--device cpu|cuda] [--batch 256] [--length 32]

Two per-sentence references, each sentence trimmed to its own length: a straightforward k-best
Viterbi as AllenNLP's ``viterbi_decode(top_k=K)`` writes it (a loop over sentences and time, top-k
over the [K*T, T] candidates, back-tracking in Python), and this engine's own ``kbest`` called one
sentence at a time (batch 1). All compute the global log-probabilities (log Z included). Sentence
lengths are uniform in [length/2, length]. Prints a Markdown table of medians over --repeats runs,
measured side by side in one process.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from seqdistill.crf import kbest, log_partition


def reference_kbest(em, tr, st, en, k):
    """One sentence ``em [n, T]``: the k best paths and their global log-probabilities."""
    n, T = em.shape
    scores = (st + em[0]).unsqueeze(0)  # [beams, T]
    back = []
    for t in range(1, n):
        flat = (scores.unsqueeze(2) + tr).reshape(-1, T)  # [beams * T(prev), T(next)]
        top, idx = flat.topk(min(k, flat.shape[0]), dim=0)
        scores = top + em[t]
        back.append(idx)
    best, idx = (scores + en).reshape(-1).topk(min(k, scores.numel()))
    paths = []
    for i in idx.tolist():
        r, tag = divmod(i, T)
        path = [tag]
        for t in range(n - 2, -1, -1):
            r, tag = divmod(int(back[t][r, tag]), T)
            path.append(tag)
        paths.append(path[::-1])
    log_z = log_partition(em[None], torch.ones(1, n, dtype=torch.bool, device=em.device), tr, st, en)
    return paths, best - log_z


def _time(fn, repeats: int, sync) -> float:
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--length", type=int, default=32)
    ap.add_argument("--tags", default="9,37")
    ap.add_argument("--k", default="1,5,10")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(args.length // 2, args.length + 1, (args.batch,), generator=g)
    mask = (torch.arange(args.length)[None] < lengths[:, None]).to(dev)
    name = (
        torch.cuda.get_device_name(dev)
        if dev.type == "cuda"
        else f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    )
    print(
        f"device: {dev.type} ({name}); torch {torch.__version__}; batch {args.batch}, length <= {args.length}, "
        f"median of {args.repeats}\n"
    )
    print(
        "| tags | K | batched (sent/s) | straightforward loop (sent/s) | speedup | engine at batch 1 (sent/s) | speedup |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for T in map(int, args.tags.split(",")):
        em = torch.randn(args.batch, args.length, T, generator=g).to(dev)
        tr, st, en = (
            torch.randn(T, T, generator=g).to(dev),
            torch.randn(T, generator=g).to(dev),
            torch.randn(T, generator=g).to(dev),
        )
        for K in map(int, args.k.split(",")):
            with torch.inference_mode():
                batched = _time(lambda: kbest(em, mask, tr, st, en, K), args.repeats, sync)
                loop = _time(
                    lambda: [reference_kbest(em[b, : int(lengths[b])], tr, st, en, K) for b in range(args.batch)],
                    args.repeats,
                    sync,
                )
                one = _time(
                    lambda: [
                        kbest(em[b : b + 1, : int(lengths[b])], mask[b : b + 1, : int(lengths[b])], tr, st, en, K)
                        for b in range(args.batch)
                    ],
                    args.repeats,
                    sync,
                )
            n = args.batch
            print(
                f"| {T} | {K} | {n / batched:,.0f} | {n / loop:,.0f} | {loop / batched:.1f}x | {n / one:,.0f} | "
                f"{one / batched:.1f}x |"
            )


if __name__ == "__main__":
    main()
