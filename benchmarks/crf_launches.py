"""What a batch's CRF work costs when the device is not the limit: operations and time at batch 2.

    .venv/bin/python benchmarks/crf_launches.py [--device cpu|cuda] [--code DIR] [--lengths 16,27,60]

The build's device loop runs, for every batch, CRF marginals with log Z (forward-backward) and
k-best Viterbi (K=10) over the batch's emissions (``crf.py``). Their loops are over time, so the
number of torch operations grows with the batch's longest sentence, not with its words; on a GPU
each operation is a kernel launch the host issues one by one. This prints, for each longest
length (T=9 tags, CoNLL's BIO), the operations dispatched (counted by a ``TorchDispatchMode``,
views included) and the median milliseconds of both at batch 2, where the arithmetic is
negligible and the time is the dispatching itself: the host's floor per batch, whatever its
size. Two rows a length: the build's call, which tells the CRF the batch's shortest sentence
(``shortest``: steps before it need no mask), and ``shortest=0``, every step masked, which is what
a GPU did before it was told (it cannot count the mask without waiting for the device). One
sentence of the two ends halfway. --code DIR measures another checkout's ``crf.py`` (side by
side with this one; a checkout without ``shortest`` counts the mask itself, as on a CPU).
"""

from __future__ import annotations

import argparse
import inspect
import platform
import statistics
import sys
import time
from pathlib import Path

if "--code" in sys.argv:
    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--code") + 1]).resolve()))
else:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from seqdistill import crf  # noqa: E402


class CountOps(TorchDispatchMode):
    """Counts the aten operations run inside it."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--code", default=None, help="a checkout whose seqdistill to measure")
    ap.add_argument("--lengths", default="16,27,60")
    ap.add_argument("--tags", type=int, default=9)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    dev, T = torch.device(args.device), args.tags
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    g = torch.Generator().manual_seed(0)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU {platform.machine()}"
    print(f"code: {Path(crf.__file__).resolve().parents[1]}; device: {name}; T={T}, K={args.k}, batch 2")
    told = "shortest" in inspect.signature(crf.kbest).parameters
    print("| longest sentence | the CRF told | operations: marginals + log Z | k-best | both, ms (median) |")
    print("|---:|---|---:|---:|---:|")
    for L in (int(x) for x in args.lengths.split(",")):
        E = torch.randn(2, L, T, generator=g).to(dev)
        mask = (torch.arange(L) < torch.tensor([L, L // 2])[:, None]).to(dev)  # one ends halfway
        A, s, e = (torch.randn(*shape, generator=g).to(dev) for shape in ((T, T), (T,), (T,)))
        for label, extra in (("shortest", {"shortest": L // 2}), ("0", {"shortest": 0})) if told else (("-", {}),):

            def marginals():
                return crf.marginals(E, mask, A, s, e, with_log_z=True, **extra)

            def kbest(log_z):
                return crf.kbest(E, mask, A, s, e, args.k, log_z=log_z, **extra)

            with CountOps() as m:
                _, log_z = marginals()
            with CountOps() as kb:
                kbest(log_z)
            times = []
            for i in range(args.repeats + 5):
                sync()
                t0 = time.perf_counter()
                kbest(marginals()[1])
                sync()
                if i >= 5:  # warm-up
                    times.append(time.perf_counter() - t0)
            print(f"| {L} | {label} | {m.count} | {kb.count} | {1000 * statistics.median(times):.2f} |")


if __name__ == "__main__":
    main()
