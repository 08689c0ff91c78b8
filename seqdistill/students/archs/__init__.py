"""Student architectures, one module each, and the loader of a student directory.

An architecture module defines ``ARCH``: its model class, whose ``arch`` attribute is the name a
student's ``config.json`` carries (``StudentConfig.arch``). The class declares all that the rest of
the tool needs of it, so that adding an architecture is its module and its test:

* ``config_class``: its config, ``StudentConfig`` or a subclass with the architecture's own
  settings (``config.json`` holds its fields);
* ``__init__(config)``, ``forward``, ``inputs(tokenizer, words)`` and ``decode``;
* ``decoder()``: the numpy decoder of its word scores (``seqdistill.decode``), which every runtime
  (torch, ONNX) shares;
* ``export_graph()``: ``(graph, inputs, fields)``, the module ``distill-export`` traces (it stops
  at word or token scores), the kind of inputs it takes (``bags``, ``subwords``, ``segments``: the
  feeds of ``seqdistill.inference.onnx_runtime``) and the fields its export.json adds. A graph may
  name ``custom_opsets`` and a ``finish_onnx(path)`` step that rewrites the exported file.

The registry finds every module of this package that defines ``ARCH``, as the recipe registry does.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from torch import nn

from ...registry import discover
from ..base import StudentConfig, config_from_json


@cache
def architectures() -> dict[str, type[nn.Module]]:
    """``StudentConfig.arch`` -> model class, of every module of this package."""
    return {cls.arch: cls for cls in discover(__name__, __path__, "ARCH")}


def load_student(directory, device: str | None = None):
    """A saved student and its tokenizer; no cache and no teacher needed."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    d = Path(directory)
    if not (d / "config.json").exists():
        raise FileNotFoundError(f"{d}: no config.json; not a seqdistill student directory")
    obj = json.loads((d / "config.json").read_text())
    arch, archs = obj.get("arch", StudentConfig.arch), architectures()
    if arch not in archs:
        raise ValueError(f"{d}: unknown student architecture {arch!r}; known: {', '.join(archs)}")
    cls = archs[arch]
    model = cls(config_from_json(getattr(cls, "config_class", StudentConfig), obj, d / "config.json"))
    model.load_state_dict(load_file(str(d / "model.safetensors")))
    model.eval()
    if device:
        model.to(device)
    return model, AutoTokenizer.from_pretrained(d / "tokenizer")
