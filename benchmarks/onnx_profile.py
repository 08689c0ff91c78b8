"""Where an exported student's time goes: ONNX Runtime's own profile of each graph node, over real
sentences, at batch 1 and 32, one thread (issue 83: the hashed word table at batch 32; issue 82: a
student that misses its speed goal is profiled before anything changes).

    .venv/bin/python benchmarks/onnx_profile.py --test $D/test.txt \
        --model default=.data/headlines/default-s13-int8 --model hashed=.data/headlines/tt-hash-s13-int8 \
        --batch 1,32 --write docs/BENCHMARKS.md

Each model runs in the session the runtime opens (``onnx_runtime.session_options``: the int8
weights folded at load, one thread). The first ``--sentences`` of the file are fed in file order
(unsorted: ``Tagger`` sorts a batch by length first, so it pads less than here), ``--rounds``
times, the models taking turns within each round: the ms a sentence is the median round's
``session.run`` time (the graph alone), and "inputs" the median time to build its inputs from words
(tokenizer, char bytes, word rows: the Python runtime's work around the graph) with warm caches. The
node shares are of ONNX Runtime's profiler's kernel time in a second, profiled session over one
more pass (apart, because the profiler's own cost per node would weigh on the times), the top
``--top`` per model, each named by its op and its node (the student's module path). Compare rows of
one run only.

The profiler's shares overstate a ``Scan``: its kernel time holds every node of its body at every
step, each with the profiler's own cost (issue 82: four SRU++ ``Scan`` nodes at 46-52% of the profiled
kernel time, while the graph cut before the first of them took 58% of the unprofiled time).
``--until NAME=TENSOR`` (repeatable) times, beside each model, its graph cut at that tensor (the
nodes that compute it, ``onnx.utils.extract_model``, which takes no graph whose subgraphs read the
outer graph's values: cut before the first ``Scan``), unprofiled, in the same rounds: a row "model,
up to NAME". The tensor names are the exporter's (``--until conv=/Mul_3_output_0`` is the output
of the ``rnn`` students' conv block).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from doc_section import write_section  # noqa: E402


def node_shares(profile: Path) -> collections.Counter:
    """Kernel microseconds per ``op: node`` from an ONNX Runtime profile file."""
    shares = collections.Counter()
    for e in json.loads(profile.read_text()):
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            shares[f"{e['args']['op_name']}: {e['name'][: -len('_kernel_time')]}"] += e["dur"]
    return shares


class Profiled:
    """One export, its batches' inputs built (which warms the tokenizer's and the word rows' caches),
    its runtime session and a second, profiled one."""

    def __init__(self, directory: Path, sents: list[list[str]], batch: int, work: Path, until: dict | None = None):
        import onnx
        import onnxruntime as ort

        from seqdistill.inference.onnx_runtime import OnnxModel, session_options

        self.model = OnnxModel(directory, threads=1)
        opts = session_options(1)
        opts.enable_profiling = True
        opts.profile_file_prefix = str(work / directory.name)
        self.profiled = ort.InferenceSession(
            str(directory / self.model.meta["onnx"]), opts, providers=["CPUExecutionProvider"]
        )
        self.batches = [sents[i : i + batch] for i in range(0, len(sents), batch)]
        self.fed = self.feeds()
        self.runs, self.inputs = [], []
        self.cuts = {}  # --until: name -> (session, its feeds, times)
        for name, tensor in (until or {}).items():
            cut = work / f"{directory.name}-until-{name}.onnx"
            names = [i.name for i in self.model.session.get_inputs()]
            onnx.utils.extract_model(str(directory / self.model.meta["onnx"]), str(cut), names, [tensor])
            session = ort.InferenceSession(str(cut), session_options(1), providers=["CPUExecutionProvider"])
            kept = {i.name for i in session.get_inputs()}
            self.cuts[name] = (session, [{k: v for k, v in f.items() if k in kept} for f in self.fed], [])

    def feeds(self) -> list[dict]:
        from seqdistill.inference.onnx_runtime import graph_feed

        m = self.model
        segmenter = getattr(m, "segmenter", None)
        return [graph_feed(m.inputs, m.meta, m.tokenizer, b, segmenter, m.word_rows)[0] for b in self.batches]

    def round(self) -> None:
        """One timed pass: the inputs built again, then the graph over them."""
        t0 = time.perf_counter()
        self.feeds()
        self.inputs.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for f in self.fed:
            self.model.session.run(None, f)
        self.runs.append(time.perf_counter() - t0)
        for session, fed, times in self.cuts.values():
            t0 = time.perf_counter()
            for f in fed:
                session.run(None, f)
            times.append(time.perf_counter() - t0)

    def result(self, sentences: int) -> dict:
        for f in self.fed:
            self.profiled.run(None, f)
        return {
            "ms": 1000 * statistics.median(self.runs) / sentences,
            "inputs_ms": 1000 * statistics.median(self.inputs) / sentences,
            "shares": node_shares(Path(self.profiled.end_profiling())),
            "until": {name: 1000 * statistics.median(t) / sentences for name, (_, _, t) in self.cuts.items()},
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", required=True, help="NAME=DIR, an export directory (repeatable)")
    ap.add_argument("--test", required=True, help="a CoNLL file whose sentences are fed")
    ap.add_argument("--sentences", type=int, default=640)
    ap.add_argument("--batch", default="1,32", help="batch sizes, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--top", type=int, default=5, help="nodes listed per model and batch")
    ap.add_argument("--write", default=None, help="replace this benchmark's section of this file")
    ap.add_argument("--section", default="", help="a name for the section, to keep several runs' tables apart")
    ap.add_argument("--until", action="append", default=[], help="NAME=TENSOR: also time the graph cut there")
    args = ap.parse_args()
    until = dict(spec.partition("=")[::2] for spec in args.until)

    from seqdistill.corpora import read_corpus
    from seqdistill.deploy.card import machine

    models = {}
    for spec in args.model:
        name, _, d = spec.partition("=")
        if not d or not (Path(d) / "export.json").is_file():
            ap.error(f"--model {spec}: write NAME=DIR, DIR an export directory (distill-export)")
        models[name] = Path(d)
    sents = [s.words for s in read_corpus(args.test, "conll", "test").sentences[: args.sentences]]
    lines = [
        "| model | batch | ms a sentence (graph) | inputs, ms | where the graph's time goes (share of kernel time) |",
        "|---|---:|---:|---:|---|",
    ]
    with tempfile.TemporaryDirectory() as work:
        for batch in (int(b) for b in args.batch.split(",")):
            runs = {name: Profiled(d, sents, batch, Path(work), until) for name, d in models.items()}
            for _ in range(args.rounds):  # the models take turns within each round
                for p in runs.values():
                    p.round()
            for name, p in runs.items():
                r = p.result(len(sents))
                total = sum(r["shares"].values()) or 1
                top = "; ".join(f"{k} {100 * v / total:.0f}%" for k, v in r["shares"].most_common(args.top))
                lines.append(f"| {name} | {batch} | {r['ms']:.3f} | {r['inputs_ms']:.3f} | {top} |")
                print(lines[-1], flush=True)
                for cut, ms in r["until"].items():
                    share = f"{100 * ms / r['ms']:.0f}% of the whole graph's time (unprofiled)"
                    lines.append(f"| {name}, up to {cut} | {batch} | {ms:.3f} | | {share} |")
    tag = f"onnx_profile:{args.section}" if args.section else "onnx_profile"
    begin, end = f"<!-- {tag}:begin -->", f"<!-- {tag}:end -->"
    m = machine(1)
    cmd = shlex.join(["benchmarks/onnx_profile.py", *sys.argv[1:]])
    text = (
        f"{begin}\n`.venv/bin/python {cmd}`, {time.strftime('%Y-%m-%d')}, {m['cpu']} ({m['cores']} cores), "
        f"one thread, the first {len(sents)} sentences of {args.test}, median of {args.rounds} rounds.\n\n"
        + "\n".join(lines)
        + f"\n{end}"
    )
    print("\n" + text)
    if args.write:
        write_section(args.write, begin, end, "## Where an export's time goes (ONNX Runtime's profile)", text)


if __name__ == "__main__":
    main()
