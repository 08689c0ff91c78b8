"""torchrun support shared by the build and the trainer: process group set-up (gloo on CPU, NCCL
on GPU), barriers, and the two collectives the trainer needs. One process (no ``WORLD_SIZE``)
never touches ``torch.distributed``, and nothing crosses processes as a pickled object."""

from __future__ import annotations

import os

import torch


def init(device: str | None) -> tuple[int, int, str | None]:
    """(rank, world size, device) for this process; the device is ``cuda:<local rank>`` on GPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, device
    import torch.distributed as dist

    use_cuda = torch.cuda.is_available() and (device or "cuda").startswith("cuda")
    if use_cuda:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo")
    return dist.get_rank(), dist.get_world_size(), device


def barrier(world: int) -> None:
    if world > 1:
        import torch.distributed as dist

        dist.barrier()


def done(world: int) -> None:
    if world > 1:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()


def sum_across(values: list[float] | torch.Tensor, world: int, device=None) -> torch.Tensor:
    """Element-wise sum over ranks (the values themselves with one process). ``device``: the
    training device (NCCL reduces CUDA tensors only)."""
    t = torch.as_tensor(values, dtype=torch.float64, device=device).clone()
    if world > 1:
        import torch.distributed as dist

        dist.all_reduce(t)
    return t


def names_across(names: set[str], world: int, device=None, width: int = 1024) -> list[str]:
    """The union of every rank's ``names``, sorted (the loss parts each rank saw this epoch: a
    rank whose batches never had a part must still reduce it). Each rank writes its names as
    UTF-8 into its own row of a byte matrix summed over the ranks: no pickled objects."""
    if world == 1:
        return sorted(names)
    import torch.distributed as dist

    text = ",".join(sorted(names)).encode()
    if len(text) > width:
        raise ValueError(f"loss part names longer than {width} bytes: {text[:80]!r}...")
    rows = torch.zeros(world, width, dtype=torch.int32, device=device)
    rows[dist.get_rank(), : len(text)] = torch.tensor(list(text), dtype=torch.int32, device=device)
    dist.all_reduce(rows)
    out: set[str] = set()
    for row in rows.tolist():
        out |= {n for n in bytes(b for b in row if b).decode().split(",") if n}
    return sorted(out)


def count_across(flag: bool, world: int, device=None) -> int:
    """How many ranks have ``flag`` set (``int(flag)`` with one process, no collective)."""
    return int(flag) if world == 1 else int(sum_across([flag], world, device).item())


def average_gradients(params: list[torch.nn.Parameter], active: int, world: int) -> None:
    """Mean of the gradients of the ``active`` ranks that had a batch this step (a rank whose part
    of the epoch is over contributes zeros), so every rank takes the same step and the weights
    stay equal everywhere — uneven parts need no padding and no example is read twice."""
    if world == 1:
        return
    import torch.distributed as dist

    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= active
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).clone()
        offset += n
