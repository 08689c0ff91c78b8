"""The README's Python block (issue 84), run as written but for the model directory, which becomes a
tiny exported student: what it prints is each span of the sentence as `Tagger` gives it, so the
README's API cannot drift from the code."""

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
BEGIN, END = "<!-- python: begin -->", "<!-- python: end -->"


def readme_python() -> str:
    text = README.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, f"README: the markers {BEGIN}"
    (block,) = re.findall(r"```python\n(.*?)```", text[text.index(BEGIN) : text.index(END)], re.S)
    return block


def test_the_readme_python_block_prints_each_span_of_its_sentence(tiny_encoder, tmp_path):
    from test_export import make_student

    from seqdistill.deploy.export import export_model
    from seqdistill.inference import Tagger

    code = readme_python()
    (path,) = re.findall(r'Tagger\.load\("([^"]+)"\)', code)
    (sentence,) = re.findall(r'tagger\("([^"]+)"\)', code)
    model = export_model(make_student(tiny_encoder, tmp_path / "s", "cnn-crf"), tmp_path / "e", quantize="int8")
    run = subprocess.run(
        [sys.executable, "-c", code.replace(path, str(model))], capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    spans = Tagger.load(model)(sentence)[0].spans
    want = [f"{s.type} {s.text!r} {s.char_start} {s.char_end} {s.score:.2f}" for s in spans]
    assert want and run.stdout.splitlines() == want  # the random student tags some words
    assert all(sentence[s.char_start : s.char_end] == s.text for s in spans)
