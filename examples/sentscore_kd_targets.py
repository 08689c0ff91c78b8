"""What the KD term of paper 004's eq. 2 can teach a student, read from a SenTScore cache alone.

    .venv/bin/python examples/sentscore_kd_targets.py CACHE [--teacher sentscore] [--tau 1 2 10]

For the words of the cache's unlabelled (silver) rows, then for those of its gold training rows:
the teacher's tag distribution p* = softmax(u* / tau) at each tau (its mean largest probability,
its mean entropy, the share of words whose largest probability is under 0.5), and whether the
word's hard label y* (silver: the teacher's path tag, the pseudo-label; gold: the gold tag) is the
argmax of u*. Where it is, the per-word minimiser of eq. 2 as the paper writes it (tau on the
teacher alone, lambda_KL = 1), q = (y* + p*) / 2, has the same argmax as y*: the KD term can
change how sure the student is, not which tag it prefers (``losses/sentscore.py`` has the
derivation). On gold rows (``distill-train --recipe sentscore --kd-rows all``) y* carries half of
q's mass whatever p* says, so there too the argmax stays y*.
"""

from __future__ import annotations

import argparse

import numpy as np

from seqdistill.cache_schema import EXAMPLES_LAYER
from seqdistill.cache_schema.reader import CacheReader


def read(reader: CacheReader, teacher: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per group (silver, gold train): the teacher's scores u* [N, T] and each word's hard label [N]."""
    fields = {EXAMPLES_LAYER: ["split", "tags"], teacher: ["kbest_paths", "tag_scores"]}
    groups: dict[str, tuple[list, list]] = {"silver": ([], []), "gold train": ([], [])}
    schema = reader.manifest.label_schema
    for row in reader.iter_examples(fields):
        split = row[EXAMPLES_LAYER]["split"]
        if split == "unlabelled":
            label, group = np.asarray(row[teacher]["kbest_paths"][0]), "silver"
        elif split == "train":
            label, group = np.asarray(schema.encode(row[EXAMPLES_LAYER]["tags"])), "gold train"
        else:
            continue
        groups[group][0].append(np.asarray(row[teacher]["tag_scores"], dtype=np.float64))
        groups[group][1].append(label)
    return {g: (np.concatenate(u), np.concatenate(y)) for g, (u, y) in groups.items() if u}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cache")
    ap.add_argument("--teacher", default="sentscore")
    ap.add_argument("--tau", type=float, nargs="+", default=[1.0, 2.0, 10.0])
    args = ap.parse_args()
    reader = CacheReader(args.cache, verify=True)
    for group, (u, y) in read(reader, args.teacher).items():
        agree = u.argmax(1) == y
        label = "pseudo-label" if group == "silver" else "gold tag"
        print(f"{args.cache}: {len(u):,} {group} words, {u.shape[1]} tags")
        print(f"{label} = argmax of the teacher's scores: {agree.sum():,} of {len(agree):,} words")
        print("| tau | mean largest p* | median largest p* | words with largest p* < 0.5 | mean entropy (nats) |")
        print("|---:|---:|---:|---:|---:|")
        for tau in args.tau:
            z = u / tau
            z = z - z.max(1, keepdims=True)  # forbidden tags are -inf and stay at p* = 0
            p = np.exp(z)
            p /= p.sum(1, keepdims=True)
            top = p.max(1)
            entropy = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(1)
            print(
                f"| {tau:g} | {top.mean():.3f} | {np.median(top):.3f} | {(top < 0.5).mean():.1%} | "
                f"{entropy.mean():.3f} |"
            )
        print(f"(uniform over {u.shape[1]} tags: entropy {np.log(u.shape[1]):.3f} nats)\n")


if __name__ == "__main__":
    main()
