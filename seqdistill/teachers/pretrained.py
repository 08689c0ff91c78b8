"""Where a teacher's pretrained model comes from: a Hugging Face directory or hub name, or a GGUF
file (llama.cpp's format) read by transformers' own GGUF loader (issue 35).

Decisions, named here:

* **One string names the source.** ``--encoder DIR`` (or a hub name) is a Hugging Face model;
  ``--encoder path/model.gguf`` is a GGUF file; ``--encoder DIR --gguf-file F`` is the same as
  ``--encoder DIR/F`` (and a hub name with ``--gguf-file`` the file in that repository). Every
  teacher kind builds through :func:`from_pretrained`, so every kind whose architecture
  transformers' GGUF loader reads (Llama, Mistral, Qwen2, Gemma 3, T5...) takes a GGUF file.
* **GGUF weights are dequantized to float32** by transformers when loaded, and trained as such.
* **A fine-tuned teacher is never saved as GGUF**: it is a normal teacher directory (safetensors,
  tokenizer, config). transformers refuses ``save_pretrained`` for a model loaded from GGUF, so
  :func:`save_model` writes its state dict with safetensors beside its config. The GGUF file's
  sha256 is recorded in ``teacher.json`` (``base``) and in the teacher's fingerprints.
* ``gguf`` and ``accelerate`` are the ``gguf`` extra; a GGUF file without them is refused with the
  command that installs them.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

GGUF_SUFFIX = ".gguf"


class PretrainedError(ValueError):
    """A pretrained source that cannot be read, with what to do."""


def gguf_source(encoder: str, gguf_file: str | None = None) -> str:
    """The one string for ``--encoder`` and ``--gguf-file``: ``DIR/F`` (a hub name: ``NAME/F``)."""
    if gguf_file is None:
        return encoder
    if not gguf_file.endswith(GGUF_SUFFIX) or "/" in gguf_file:
        raise PretrainedError(f"--gguf-file {gguf_file!r}: give the name of a {GGUF_SUFFIX} file inside --encoder")
    return f"{encoder.rstrip('/')}/{gguf_file}"


def split(source: str | os.PathLike) -> tuple[str, dict]:
    """``(directory or hub name, extra from_pretrained arguments)`` of a source (a string or any
    path-like object: ``benchmarks/build_throughput.py`` passes a ``pathlib.Path``)."""
    source = os.fspath(source)
    if not source.endswith(GGUF_SUFFIX):
        return source, {}
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise PretrainedError(
            f"{source}: reading a GGUF file needs the {' and '.join(missing)} package(s): "
            "pip install 'seqdistill[gguf]'"
        )
    p = Path(source)
    if p.parent.is_dir() and not p.is_file():  # a local path (a hub name has no local parent)
        raise PretrainedError(f"{source}: no such GGUF file")
    return str(p.parent), {"gguf_file": p.name}


def from_pretrained(auto_class, source: str | os.PathLike, *, trust_remote_code: bool = False, **kwargs):
    """``auto_class.from_pretrained`` over a source (directory, hub name or GGUF file)."""
    path, extra = split(source)
    if extra and not auto_class.__name__.endswith(("Tokenizer", "Config")):
        import torch

        kwargs.setdefault("dtype", torch.float32)  # dequantized to float32, trained as such
    try:
        return auto_class.from_pretrained(path, trust_remote_code=trust_remote_code, **extra, **kwargs)
    except OSError as e:  # transformers' "not a local folder and not a valid model identifier", offline or not
        if Path(path).exists():
            raise
        raise PretrainedError(hub_missing(path, e)) from None


def hub_missing(name: str, error: Exception) -> str:
    """Why ``name``, not a local path, could not be had from the Hugging Face Hub: offline and not
    in its cache, or not found (transformers and huggingface_hub honour HF_HUB_OFFLINE and
    HF_HUB_CACHE alike), with what to do."""
    from huggingface_hub import constants

    where = (
        f"offline (HF_HUB_OFFLINE=1) and not in the hub cache {constants.HF_HUB_CACHE}: download it where "
        "the Hub is reachable, or give a local directory"
        if constants.HF_HUB_OFFLINE
        else f"not found on the Hugging Face Hub nor in its cache {constants.HF_HUB_CACHE} "
        "(a private model needs HF_TOKEN)"
    )
    return f"{name}: not a local directory; as a Hub id it is {where} ({type(error).__name__})"


def base_record(source: str | os.PathLike) -> dict | None:
    """What ``teacher.json`` records of a GGUF source (its file name and sha256); None otherwise."""
    source = os.fspath(source)
    if not source.endswith(GGUF_SUFFIX) or not Path(source).is_file():
        return None  # a hub GGUF file is named by its repository and name only
    from .base import file_sha256

    return {"gguf_file": Path(source).name, "gguf_sha256": file_sha256(source)}


def save_model(model, directory: Path) -> None:
    """``model.save_pretrained`` (safetensors), or, for a model transformers will not save (loaded
    from GGUF), its state dict through safetensors beside its config: the same files a later
    ``from_pretrained(directory)`` reads."""
    try:
        model.save_pretrained(directory, safe_serialization=True)
        return
    except ValueError as e:
        if "gguf" not in str(e).lower() and "quantiz" not in str(e).lower():
            raise
    from safetensors.torch import save_model as save_safetensors

    model.config.architectures = [type(model).__name__]  # what save_pretrained records
    model.config.save_pretrained(directory)
    save_safetensors(model, str(Path(directory) / "model.safetensors"), metadata={"format": "pt"})
