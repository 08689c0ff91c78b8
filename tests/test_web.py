"""distill-export --web: the folder it writes (an export directory plus the page and the JavaScript
runtime), the tokenizer check, refusals by name; and, with ``make test-web`` (SEQDISTILL_WEB=1), the
JavaScript runtime in Node and in Chromium against Python's Tagger on a tiny model of every kind
(js/test/: 0 differences in words, tags, spans and offsets, scores to 1e-4)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from test_export import STUDENTS, make_student, make_teacher, sentences

from seqdistill.deploy.export import export_model
from seqdistill.deploy.web import RUNTIME, VENDOR, export_web
from seqdistill.inference import ExportError, Tagger

# texts of many scripts, as a page gets them: accents, emoji, CJK, right-to-left, clitics, numbers
GOLDEN_TEXTS = [
    "Peter Blackburn visits Paris.",
    "Smith's don't they'll've U.S. p.m. J. Smith in 1996. 3,000 1/2 .500 -- ... x\n1. Steffi Graf",
    "北京是首都 我在Google工作 ナイキ 東京タワー。",
    "👍🏽 🇺🇸 family 👨‍👩‍👧 ok 😀😀 anna",
    "café naïve e\u0301 हिन्दी Zoë's São Paulo",
    "مرحبا بالعالم في دبي peter",
    "שלום ירושלים rome",
    "1996-08-22 a-b 3.5 Corp. +44 zz9",
    "𝐀𝐁𝐂 𠀀𠀁 x'y 𝑃𝑒𝑡𝑒𝑟",
    "\u200bzero\u200d width\ufeff the eu",
    "Germany 's view . Next",
    "a\r\n2. b\u2028 3. c",
    "",
    "   ",
]


def golden_inputs() -> list:
    """The golden set: raw texts, and pre-split sentences (a long one past every tiny window)."""
    return [
        *GOLDEN_TEXTS,
        *sentences(24, seed=5, long=50),
        ["pre", "split", "👍🏽", "é", "東京"],
        # a word vector table's lookups (test_export.VECTOR_WORDS): as written, then lowercased by
        # Unicode's full mapping (İ to i + U+0307, a final Σ to ς), in both languages
        ["PARIS", "Paris", "paris", "İstanbul", "CAFÉ", "Café", "ΟΔΟΣ", "Zoë's", "NAÏVE", "東京", "London"],
    ]


def fake_runtime(d: Path) -> Path:
    """The layout of js/ with node_modules, for tests that do not run the JavaScript."""
    for rel in VENDOR:
        (d / "node_modules" / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / "node_modules" / rel).write_text("x")
    for name in ("onnxruntime-web", "@huggingface/tokenizers"):
        (d / "node_modules" / name / "package.json").write_text(json.dumps({"version": "1.0", "license": "MIT"}))
    (d / "src").mkdir()
    (d / "src" / "tagger.js").write_text("//")
    (d / "page").mkdir()
    (d / "page" / "index.html").write_text("<html>")
    (d / "package.json").write_text(json.dumps({"name": "seqdistill-web", "version": "0.1.0"}))
    return d


def test_the_page_policy_allows_its_own_import_map():
    """The Content-Security-Policy names the import map (an inline script) by its sha256; a change to
    the map without the hash would leave the page blank."""
    html = (RUNTIME / "page" / "index.html").read_text()
    import_map = re.search(r'<script type="importmap">(.*?)</script>', html, re.S).group(1)
    digest = base64.b64encode(hashlib.sha256(import_map.encode()).digest()).decode()
    assert f"'sha256-{digest}'" in html
    assert "connect-src 'self'" in html


def test_a_web_folder_is_an_export_with_the_page(tiny_encoder, tmp_path):
    src = make_student(tiny_encoder, tmp_path / "s", "bilstm-crf")
    out = export_web(src, tmp_path / "web", runtime=fake_runtime(tmp_path / "js"))
    web = json.loads((out / "web.json").read_text())
    assert {k: web["tokenizer"][k] for k in ("unk_id", "pad_id", "prefix", "suffix")} == {
        "unk_id": 1,
        "pad_id": 0,
        "prefix": [2],
        "suffix": [3],
    }
    assert "web.json" in json.loads((out / "export.json").read_text())["files"]  # checked like every file
    assert web["tokenizer"]["probe"]["Peter"] == [
        int(i) for i in Tagger.load(src).backend.tokenizer("Peter", add_special_tokens=False)["input_ids"]
    ]
    assert web["words"] == "default" and web["libraries"] == {
        "onnxruntime-web": "1.0",
        "@huggingface/tokenizers": "1.0",
    }
    assert json.loads((out / "export.json").read_text())["quantize"] == "int8"  # the page's default
    for rel in [*VENDOR.values(), "seqdistill/tagger.js", "index.html", "vendor/NOTICE"]:
        assert (out / rel).is_file(), rel
    plain = export_model(src, tmp_path / "plain", quantize="int8")
    assert (out / "model.onnx").read_bytes() == (plain / "model.onnx").read_bytes()
    sents = sentences(8)
    assert Tagger.load(out).predict(sents) == Tagger.load(plain).predict(sents)  # Tagger reads it as an export
    again = export_web(out, tmp_path / "again", runtime=tmp_path / "js")  # from an export: copied, not re-exported
    assert (again / "model.onnx").read_bytes() == (out / "model.onnx").read_bytes()
    with pytest.raises(ExportError, match="exported with --quantize int8, not none"):
        export_web(out, tmp_path / "fp32", quantize="none", runtime=tmp_path / "js")


def test_the_command_takes_one_of_out_and_web(tiny_encoder, tmp_path):
    from click.testing import CliRunner

    from seqdistill.cli.export import main

    src = make_student(tiny_encoder, tmp_path / "s", "bilstm-crf")
    for args in ([], ["--out", str(tmp_path / "a"), "--web", str(tmp_path / "b")]):
        result = CliRunner().invoke(main, ["--model", str(src), *args])
        assert result.exit_code == 2 and "give one of --out" in result.output
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_refusals_name_what_to_do(tiny_encoder, tmp_path):
    src = make_student(tiny_encoder, tmp_path / "s", "bilstm-crf")
    with pytest.raises(ExportError, match="npm ci --prefix"):
        export_web(src, tmp_path / "web", runtime=tmp_path / "nothing")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(ExportError, match="exists and is not empty"):
        export_web(src, tmp_path / "full", runtime=fake_runtime(tmp_path / "js"))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".web")]  # nothing half-written


# -- the JavaScript runtime against Python (make test-web) ---------------------------------------

MIN_SCORE = 0.6
FIXTURES = [
    *((f"student-{i:02d}-{arch}", arch, kw) for i, (arch, kw) in enumerate(STUDENTS)),
    ("student-ptb-calibrated", "bilstm-crf", {"extra": {"words": "ptb"}, "temperature": 1.7}),
    *((f"teacher-{kind}", "teacher", {"kind": kind}) for kind in ("crf", "softmax", "bilou-per-type")),
    ("teacher-crf-mean", "teacher", {"kind": "crf", "pooling": "mean"}),  # each word the mean of its subwords
    # a hashed word table and every other embedding table at 4 bits (issue 83, --table-bits 4)
    ("student-hashed-int4", "cnn-crf", {**next(kw for _, kw in STUDENTS if "word_hash_rows" in kw), "table_bits": 4}),
]


@pytest.mark.skipif(not os.environ.get("SEQDISTILL_WEB"), reason="the JavaScript runtime's tests: make test-web")
def test_the_javascript_runtime_gives_the_taggers_answers(tiny_encoder, tmp_path):
    """Every student architecture (trimmed vocabularies and the char feature included) and teacher
    kind, as a web folder, with golden.json: Python's Tagger on that very folder. js/test/ then tags
    the golden inputs in Node (golden.test.js) and in Chromium (browser.test.js) and finds 0
    differences; the browser test says why it skips when there is no Chromium. The run leaves no
    folder in its temporary directory (TMPDIR, a folder of this test's): each JavaScript test
    removes the copies it made there (support.js's brokenCopy), and Chromium its profile."""
    from seqdistill.inference.tagger import CALIBRATION_FILE

    root = tmp_path / "fixtures"
    inputs = golden_inputs()
    for name, arch, kw in FIXTURES:
        kw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in kw.items()}
        temperature = kw.pop("temperature", None)
        table_bits = kw.pop("table_bits", 8)
        if arch == "teacher":
            src = make_teacher(tiny_encoder, tmp_path / name, **kw)
        else:
            src = make_student(tiny_encoder, tmp_path / name, arch, **kw)
        if temperature:
            (Path(src) / CALIBRATION_FILE).write_text(json.dumps({"temperature": temperature}))
        out = export_web(src, root / name, quantize="none" if arch == "teacher" else "int8", table_bits=table_bits)
        tagger = Tagger.load(out, threads=1)
        golden = {
            "inputs": inputs,
            "answers": [s.to_json() for s in tagger(inputs)],
            "min_score": MIN_SCORE,  # and the answers with the spans below it dropped
            "answers_min_score": [s.to_json() for s in tagger(inputs, min_score=MIN_SCORE)],
        }
        (out / "golden.json").write_text(json.dumps(golden, ensure_ascii=False))
    write_classes(root / "classes.json")
    write_numpy_cases(root / "numpy.json")
    # the run's temporary directory (os.tmpdir() of the JavaScript, Chromium's): a folder of its own in the
    # system's, short, as Chromium's socket paths under it must be (108 bytes); removed afterwards
    scratch = Path(tempfile.mkdtemp(prefix="seqdistill-web-"))
    try:
        run = subprocess.run(
            ["npm", "test", "--silent"],
            cwd=RUNTIME,
            env={**os.environ, "SEQDISTILL_WEB_FIXTURES": str(root), "TMPDIR": str(scratch)},
            capture_output=True,
            text=True,
            timeout=900,
        )
        print(run.stdout[-6000:], run.stderr[-3000:])
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
        # no folder left there (only onnxruntime's own files: its telemetry's .ses and mat-debug-PID.log)
        assert [p.name for p in scratch.iterdir() if p.is_dir()] == []
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def write_numpy_cases(path: Path) -> None:
    """float32 arrays of many lengths (pairwise summation changes its order at 8 and 128 values)
    with numpy's float32 sum and mean, float64 sum, and the decoders' softmax of them."""
    import numpy as np

    from seqdistill.decode import softmax

    rng = np.random.default_rng(0)
    cases = []
    for n in (1, 2, 7, 8, 9, 15, 16, 17, 100, 128, 129, 300, 1000):
        a = (rng.standard_normal(n) * rng.choice([1e-3, 1, 1e3], n)).astype(np.float32)
        cases.append(
            {
                "values": a.tolist(),
                "sum32": float(a.sum()),
                "mean32": float(a.mean()),
                "sum64": float(a.astype(np.float64).sum()),
                "softmax": softmax(a[None] / np.float32(1000))[0].tolist(),
            }
        )
    path.write_text(json.dumps(cases))


def write_classes(path: Path) -> None:
    """The words rules' character classes under Python's ``regex``, as code point ranges, and the code
    points unassigned in its Unicode (where a JavaScript engine of another Unicode version may differ)."""
    import regex

    from seqdistill.corpora.words import CJK, LETTERS

    patterns = {
        "letters": LETTERS,
        "cjk": f"[{CJK}]",
        "space": r"\s",
        "digit": r"\d",
        "letter": r"\p{L}",
        "upper": r"\p{Lu}",
        "unassigned": r"\p{Cn}",
    }

    def ranges(pattern: str) -> list[list[int]]:
        p = regex.compile(pattern, regex.V1)
        out: list[list[int]] = []
        for c in range(0x110000):
            if 0xD800 <= c <= 0xDFFF or not p.match(chr(c)):
                continue
            if out and out[-1][1] == c - 1:
                out[-1][1] = c
            else:
                out.append([c, c])
        return out

    classes = {name: ranges(p) for name, p in patterns.items()}
    path.write_text(json.dumps({"unassigned": classes.pop("unassigned"), "classes": classes}))
