"""Training checkpoints without pickle: tensors in safetensors, everything else in JSON.

Used by the student trainer and by the teacher fine-tuning loop. A checkpoint holds the modules
(student, teacher), the optimizer (its per-parameter tensors flattened by name), the
loss weights, the torch RNG state and the trainer's position: epoch, step, and how many batches
each stream part had delivered in the current epoch (see ``CacheStream.skip``), so a run killed
mid-epoch resumes with the same step count and without seeing an example twice. A run killed
while swapping checkpoints resumes from the previous one (``.checkpoint.old``).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import MISSING, fields
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .cache_schema.storage import failpoint

CHECKPOINT = "checkpoint"


def save_checkpoint(
    out_dir, modules: dict[str, torch.nn.Module], optimizer: torch.optim.Optimizer, state: dict
) -> None:
    """Write ``out_dir/checkpoint`` atomically (a temporary directory renamed into place)."""
    out_dir = Path(out_dir)
    tmp = out_dir / f".{CHECKPOINT}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tensors, aliases, seen = {}, {}, {}
    for name, m in modules.items():
        for k, v in m.state_dict().items():
            key = (v.data_ptr(), v.dtype, tuple(v.shape))
            if v.numel() and key in seen:  # a tensor shared between modules (co-fine-tuned teachers' head)
                aliases[f"{name}.{k}"] = seen[key]
                continue
            seen[key] = f"{name}.{k}"
            tensors[f"{name}.{k}"] = v.detach().cpu().contiguous()
    opt = optimizer.state_dict()
    scalars: dict = {}
    for pid, st in opt["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v):
                tensors[f"optimizer.{pid}.{k}"] = v.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(pid), {})[k] = v
    tensors["rng.torch"] = torch.get_rng_state()
    save_file(tensors, str(tmp / "tensors.safetensors"))
    meta = {"state": state, "aliases": aliases, "optimizer": {"param_groups": opt["param_groups"], "scalars": scalars}}
    (tmp / "state.json").write_text(json.dumps(meta, indent=1) + "\n")
    final = out_dir / CHECKPOINT
    old = out_dir / f".{CHECKPOINT}.old"
    if final.exists():  # (a run resumed from .checkpoint.old has no final: keep old until tmp is in place)
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    failpoint(f"checkpoint-swap:{state.get('step')}")
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def checkpoint_state(out_dir) -> dict | None:
    """The trainer state a checkpoint of ``out_dir`` holds (its ``state.json``), without loading
    any tensor: what a run checks before restoring anything. None if there is no checkpoint."""
    for name in (CHECKPOINT, f".{CHECKPOINT}.old"):  # .old: killed between the two renames of save_checkpoint
        path = Path(out_dir) / name / "state.json"
        if path.exists():
            return json.loads(path.read_text())["state"]
    return None


def load_checkpoint(
    out_dir, modules: dict[str, torch.nn.Module], optimizer: torch.optim.Optimizer | None
) -> dict | None:
    """Restore a checkpoint into ``modules`` and ``optimizer`` and restore the torch RNG; return the
    trainer state (None if there is no checkpoint). With ``optimizer=None`` the optimizer's state
    dict is returned as ``state["optimizer_state"]``, for an optimizer built later."""
    d = Path(out_dir) / CHECKPOINT
    if not (d / "state.json").exists():
        d = Path(out_dir) / f".{CHECKPOINT}.old"  # killed between the two renames of save_checkpoint
        if not (d / "state.json").exists():
            return None
    meta = json.loads((d / "state.json").read_text())
    tensors = load_file(str(d / "tensors.safetensors"))
    tensors.update({alias: tensors[name] for alias, name in meta.get("aliases", {}).items()})
    for name, m in modules.items():
        prefix = f"{name}."
        m.load_state_dict({k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)})
    state: dict = {}
    for key, v in tensors.items():
        if key.startswith("optimizer."):
            _, pid, name = key.split(".", 2)
            state.setdefault(int(pid), {})[name] = v
    for pid, st in meta["optimizer"]["scalars"].items():
        state.setdefault(int(pid), {}).update(st)
    optimizer_state = {"state": state, "param_groups": meta["optimizer"]["param_groups"]}
    torch.set_rng_state(tensors["rng.torch"])
    if optimizer is None:
        return {**meta["state"], "optimizer_state": optimizer_state}
    optimizer.load_state_dict(optimizer_state)
    return meta["state"]


def remove_checkpoint(out_dir) -> None:
    """Delete ``out_dir``'s checkpoint (and a half-swapped one) once a run has finished."""
    for name in (CHECKPOINT, f".{CHECKPOINT}.old", f".{CHECKPOINT}.tmp"):
        shutil.rmtree(Path(out_dir) / name, ignore_errors=True)


def config_defaults(cfg) -> dict:
    """The defaults of the dataclass ``cfg``'s settings, JSON-shaped as checkpoints record settings."""
    out = {}
    for f in fields(cfg):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return json.loads(json.dumps(out))


def changed_setting(saved: dict, now: dict, defaults: dict, ignore=()) -> str | None:
    """The first setting (by name) whose value in the run ``now`` differs from the checkpoint's
    ``saved`` one, or None: the run may resume. Decision: a setting the checkpoint lacks (it was
    written before the option existed) ran with what is now its default, so a run that leaves it at
    the default is the same run; a new option does not strand the runs in progress."""
    for k in sorted(set(saved) | set(now)):
        if k in ignore or (k not in saved and k in defaults and now.get(k) == defaults[k]):
            continue
        if saved.get(k) != now.get(k):
            return k
    return None
