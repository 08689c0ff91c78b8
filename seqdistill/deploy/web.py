"""``distill-export --web DIR``: a student (or teacher) as a static folder that tags text in a web
page, with nothing sent anywhere: the export directory of ``deploy.export`` (graph, tokenizer,
decoding tables, export.json) plus the JavaScript runtime of the repository's ``js/`` package, the
browser builds of onnxruntime-web (its WASM backend) and of ``@huggingface/tokenizers``, a
``web.json`` and an ``index.html``.

Decisions, named here:

* **An option of distill-export, not a command of its own**: the folder is an export directory
  (``Tagger.load`` and ``distill-eval`` read it as one, which is how the golden tests compare the
  page with Python on the very same graph) with the page's files beside it. ``--model`` may name a
  student or teacher (exported first) or an export directory (copied as it is).
* **The runtime comes from the repository's ``js/`` folder** (its sources, and onnxruntime-web and
  the tokenizers from ``js/node_modules``, installed by ``npm ci --prefix js``, which ``make
  test-web`` runs): one copy of the runtime for Node, the page and the tests, at the versions its
  lockfile pins. A folder without them is refused with that command.
* **web.json** records what the page needs that only Python knows: the tokenizer's special tokens
  around a sentence (``prefix``, ``suffix``, as ``tokenization.WordTokenizer`` finds them), its
  unknown and pad tokens, and the pieces Python gives words of many scripts (``probe``); its sha256
  joins the others in export.json's ``files``. The runtime
  tokenizes each word alone with tokenizers.js (Python's pre-tokenized encoding also reads each word
  alone), and at load it compares its pieces of the probe words with Python's and refuses a
  tokenizer that tokenizers.js reads otherwise, naming the word.
* **The page's privacy is shown, not promised**: its Content-Security-Policy lets it connect to its
  own origin only, and it counts the requests made after the model loaded (``js/page/``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from ..inference.onnx_runtime import EXPORT_JSON, ExportError, check_files, is_export_dir, read_export_json, sha256_file
from .export import export_model

WEB_JSON = "web.json"
WEB_FORMAT = "seqdistill-web"
WEB_VERSION = 1
RUNTIME = Path(__file__).resolve().parents[2] / "js"  # the repository's JavaScript package

# what the page loads from js/node_modules, and where it goes in the folder
VENDOR = {
    "onnxruntime-web/dist/ort.wasm.min.mjs": "vendor/onnxruntime-web/ort.wasm.min.mjs",
    "onnxruntime-web/dist/ort-wasm-simd-threaded.mjs": "vendor/onnxruntime-web/ort-wasm-simd-threaded.mjs",
    "onnxruntime-web/dist/ort-wasm-simd-threaded.wasm": "vendor/onnxruntime-web/ort-wasm-simd-threaded.wasm",
    "@huggingface/tokenizers/dist/tokenizers.min.mjs": "vendor/tokenizers/tokenizers.min.mjs",
    "@huggingface/tokenizers/LICENSE": "vendor/tokenizers/LICENSE",
}

# words of many scripts whose pieces the runtime checks at load against Python's (web.json's ``probe``)
PROBE = (
    "Peter Blackburn visits Paris . U.S. don't 1996-08-22 3,000 café naïve Zürich São Paulo "
    "北京 東京タワー 서울 مرحبا ירושלים हिन्दी Москва 👍🏽 🇺🇸 ( ) $ — x"
).split()


def runtime_files(runtime: Path = RUNTIME) -> dict[Path, str]:
    """Every file the page needs from the JavaScript package, and its path in the folder."""
    modules = runtime / "node_modules"
    missing = [p for p in VENDOR if not (modules / p).is_file()]
    if not (runtime / "src").is_dir() or missing:
        raise ExportError(
            f"{runtime}: the JavaScript runtime is not installed ({missing[0] if missing else 'src/'} is missing); "
            f"run `npm ci --prefix {runtime}` (Node 20 and npm) in a checkout of the repository"
        )
    files = {modules / src: dst for src, dst in VENDOR.items()}
    files.update({p: f"seqdistill/{p.name}" for p in sorted((runtime / "src").glob("*.js")) if p.name != "node.js"})
    files.update({p: p.name for p in sorted((runtime / "page").iterdir()) if p.is_file()})
    return files


def tokenizer_framing(tokenizer_dir: Path) -> dict:
    """What the JavaScript runtime needs of the tokenizer: the special tokens around a sentence (as
    ``tokenization.WordTokenizer`` finds them), the unknown token, and each ``PROBE`` word's pieces
    (``tokenization.word_pieces``), which the runtime compares with its own at load."""
    from transformers import AutoTokenizer

    from ..tokenization import WordTokenizer, word_pieces

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    if not getattr(tok, "is_fast", False):
        raise ExportError(f"{tokenizer_dir}: not a fast tokenizer (no tokenizer.json), which the page reads")
    framing = WordTokenizer(tok, max_length=1 << 20)  # its special tokens; the length is the export's own
    unk = tok.unk_token_id if tok.unk_token_id is not None else 0
    pieces = word_pieces(tok, [list(PROBE)])[0]
    return {
        "unk_id": unk,
        "pad_id": framing.pad_id,
        "prefix": framing.prefix,
        "suffix": framing.suffix,
        "probe": dict(zip(PROBE, pieces)),
    }


def export_web(
    model_dir,
    out_dir,
    *,
    quantize: str | None = None,
    trust_remote_code: bool = False,
    runtime: Path = RUNTIME,
    word_vectors_rows: int = 0,
    table_bits: int = 8,
) -> Path:
    """Write the web folder of ``model_dir`` (a student, a teacher or an export directory) to
    ``out_dir``, a new directory written whole or not at all. ``quantize``: a model's export (None:
    int8, a page's bytes being its load time); an export directory is taken as it is, and refused
    when ``quantize`` asks for another."""
    src, out = Path(model_dir), Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out}: exists and is not empty; choose a new directory or remove it")
    files = runtime_files(Path(runtime))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        folder = tmp / "web"
        if src.is_dir() and is_export_dir(src):
            if word_vectors_rows or table_bits != 8:
                flag = "--word-vectors-rows" if word_vectors_rows else "--table-bits"
                raise ExportError(f"{src}: already exported; {flag} needs the student it came from")
            meta = read_export_json(src)
            if quantize is not None and meta.get("quantize", "none") != quantize:
                raise ExportError(
                    f"{src}: exported with --quantize {meta.get('quantize', 'none')}, not {quantize}; "
                    "give the student or teacher it came from instead"
                )
            check_files(src, meta)
            shutil.copytree(src, folder)
        else:
            export_model(
                src,
                folder,
                quantize=quantize or "int8",
                trust_remote_code=trust_remote_code,
                word_vectors_rows=word_vectors_rows,
                table_bits=table_bits,
            )
        meta = read_export_json(folder)
        framing = tokenizer_framing(folder / "tokenizer")
        for path, rel in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, folder / rel)
        package = json.loads((Path(runtime) / "package.json").read_text())
        libraries = {
            name: json.loads((Path(runtime) / "node_modules" / name / "package.json").read_text())
            for name in ("onnxruntime-web", "@huggingface/tokenizers")
        }
        versions = {name: p["version"] for name, p in libraries.items()}
        (folder / "vendor" / "NOTICE").write_text(  # onnxruntime-web's npm package ships no LICENSE file
            "".join(
                f"{name} {p['version']}: {p['license']} license, {p.get('homepage', '')}\n"
                for name, p in libraries.items()
            )
        )
        web = {
            "format": WEB_FORMAT,
            "format_version": WEB_VERSION,
            "runtime": f"{package['name']} {package['version']}",
            "libraries": versions,
            "words": meta.get("words", "default"),
            "tokenizer": framing,
        }
        (folder / WEB_JSON).write_text(json.dumps(web, indent=1) + "\n")
        meta["files"][WEB_JSON] = sha256_file(folder / WEB_JSON)  # checked at load, as every file the page reads
        (folder / EXPORT_JSON).write_text(json.dumps(meta, indent=1) + "\n")
        if out.exists():
            out.rmdir()
        folder.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
