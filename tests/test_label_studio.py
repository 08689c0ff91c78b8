"""The Label Studio round trip against the real thing (issue 37): Label Studio from PyPI started on
loopback, the tasks ``distill-cache select --format label-studio`` writes imported through its API,
annotated through its API (each task's prediction accepted, one relabelled), exported as JSON and
read back into a cache as a labelled corpus.

Label Studio pins its own Django stack, so it lives in a virtual environment of its own
(``make test-label-studio`` makes ``.venv-ls`` and runs this file); the test is skipped when
``LABEL_STUDIO`` (the path of its ``label-studio`` executable) is not set. Not tested here: the
browser UI, and Label Studio's other export formats (CoNLL, spaCy), which seqdistill does not read.
"""

import json
import os
import socket
import subprocess
import time
import urllib.request

import pytest
from conftest import toy_cache

from seqdistill.cache_schema import CacheReader, LabelSchema
from seqdistill.cli.cache import main as cache_cli
from seqdistill.corpora import read_corpus
from seqdistill.pipeline.build import BuildConfig, CorpusSpec, build_cache
from seqdistill.teachers import build_teacher

EXE = os.environ.get("LABEL_STUDIO")
pytestmark = [
    pytest.mark.label_studio,
    pytest.mark.skipif(not EXE, reason="LABEL_STUDIO is not set (make test-label-studio sets it)"),
]
TOKEN = "0123456789abcdef0123456789abcdef01234567"


def _api(base, method, path, body=None):
    req = urllib.request.Request(
        base + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Token {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read() or b"null")


@pytest.fixture()
def label_studio(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "LABEL_STUDIO_BASE_DATA_DIR": str(tmp_path / "ls-data"),
        "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
        "LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK": "true",
    }
    args = [EXE, "start", "--no-browser", "--host", "127.0.0.1", "--port", str(port)]
    args += ["--username", "annotator@example.com", "--password", "seqdistill-test", "--user-token", TOKEN]
    log = open(tmp_path / "label-studio.log", "w")
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        else:
            raise RuntimeError(
                f"Label Studio did not answer /health: {(tmp_path / 'label-studio.log').read_text()[-2000:]}"
            )
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_select_annotate_in_label_studio_export_and_build(tiny_encoder, tmp_path, label_studio):
    from click.testing import CliRunner

    cache = toy_cache(tiny_encoder, tmp_path)
    tasks_file = tmp_path / "tasks.json"
    r = CliRunner().invoke(
        cache_cli,
        [
            "select",
            cache,
            "--strategy",
            "margin",
            "--n",
            "6",
            "--out",
            str(tasks_file),
            "--format",
            "label-studio",
            "--diversity",
            "1",
        ],
    )
    assert r.exit_code == 0, r.output
    config = (tmp_path / "tasks.json.config.xml").read_text()
    project = _api(label_studio, "POST", "/api/projects", {"title": "seqdistill round trip", "label_config": config})
    tasks = json.loads(tasks_file.read_text())
    _api(label_studio, "POST", f"/api/projects/{project['id']}/import", tasks)
    stored = _api(label_studio, "GET", f"/api/tasks?project={project['id']}&page_size=100")
    stored = stored["tasks"] if isinstance(stored, dict) else stored
    assert len(stored) == 6
    for i, task in enumerate(sorted(stored, key=lambda t: t["id"])):
        words = task["data"]["words"]
        if i == 0:  # the annotator labels the first word PER, whatever the teacher said
            result = [
                {
                    "from_name": "label",
                    "to_name": "text",
                    "type": "labels",
                    "value": {"start": 0, "end": len(words[0]), "text": words[0], "labels": ["PER"]},
                }
            ]
        else:  # the others accept the teacher's prediction as it is
            pred = next(p for p in tasks if p["data"]["example_id"] == task["data"]["example_id"])["predictions"][0]
            result = [{k: v for k, v in x.items() if k != "score"} for x in pred["result"]]
        _api(label_studio, "POST", f"/api/tasks/{task['id']}/annotations", {"result": result, "task": task["id"]})
    exported = _api(label_studio, "GET", f"/api/projects/{project['id']}/export?exportType=JSON")
    export_file = tmp_path / "export.json"
    export_file.write_text(json.dumps(exported))
    corpus = read_corpus(f"ls:{export_file}", "annotated")
    assert len(corpus.sentences) == 6
    first = next(s for s, t in zip(corpus.sentences, exported) if t["id"] == min(x["id"] for x in exported))
    assert first.tags[0] == "B-PER"
    # the annotated rows come back as a labelled corpus of a new cache
    build_teacher(tiny_encoder, LabelSchema("IOB2", ("LOC", "PER")), "crf").save(tmp_path / "teacher2")
    specs = [CorpusSpec.parse(f"annotated=ls:{export_file}@train", True)]
    build_cache(
        str(tmp_path / "cache2"), str(tmp_path / "teacher2"), specs, BuildConfig(device="cpu"), log=lambda *a: None
    )
    m = CacheReader(str(tmp_path / "cache2")).manifest
    assert [(c.name, c.split, c.labelled, c.examples) for c in m.corpora] == [("annotated", "train", True, 6)]
