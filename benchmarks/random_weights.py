"""A model directory with a real architecture and tokenizer but random weights, for speed figures.

    .venv/bin/python benchmarks/random_weights.py config SOURCE OUT     # here: keep config + tokenizer
    python3 benchmarks/random_weights.py weights OUT                     # there: add random weights

Why: a lent GPU machine reaches nothing outside it, and what travels to it is capped at 64 MiB, so
EmbeddingGemma-300M (1.2 GB) and Gemma 3 270M (a 240 MB GGUF file) cannot go there. Their speed
does not depend on their weights (a CRF teacher's forward pass and k-best, SenTScore's tag-wise beam
search over a fixed template: the same shapes and the same number of steps whatever the weights),
so the device benchmarks run on the same architecture, built from its ``config.json``, with random
weights, and the real tokenizer. ``config`` writes SOURCE's config and tokenizer (a model directory,
a hub name or a GGUF file) into OUT, with ``tokenizer.json`` unindented; ``weights`` builds the
model from OUT's config (``AutoModelForCausalLM`` when the config names a causal LM, else
``AutoModel``), seeded, and saves it into OUT as safetensors. Accuracy is never measured on such a
directory.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def write_config(source: str, out: Path) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from seqdistill.teachers.pretrained import from_pretrained
    from seqdistill.vocabulary import save_tokenizer

    out.mkdir(parents=True, exist_ok=True)
    config = from_pretrained(AutoConfig, source)
    if not config.architectures:  # a GGUF file's config names none; its model is a causal LM
        config.architectures = [AutoModelForCausalLM._model_mapping[type(config)].__name__]
    config.save_pretrained(out)
    save_tokenizer(from_pretrained(AutoTokenizer, source), out)


def write_weights(out: Path, seed: int = 0) -> None:
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(out)
    causal = any(a.endswith("ForCausalLM") for a in (config.architectures or []))
    torch.manual_seed(seed)
    model = (AutoModelForCausalLM if causal else AutoModel).from_config(config)
    model.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    print(json.dumps({"dir": str(out), "class": type(model).__name__, "parameters": n}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="step", required=True)
    c = sub.add_parser("config")
    c.add_argument("source")
    c.add_argument("out", type=Path)
    w = sub.add_parser("weights")
    w.add_argument("out", type=Path)
    w.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.step == "config":
        write_config(args.source, args.out)
    else:
        write_weights(args.out, args.seed)


if __name__ == "__main__":
    main()
