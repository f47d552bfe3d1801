"""Where models run: naming a device, a Ray worker's device, and moving training state between
devices (checkpoints and weight syncs travel on the CPU; collocated workers offload to host memory).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainer.configs.errors import ConfigError

CPU = torch.device("cpu")


def resolve_device(name: str) -> torch.device:
    """``run.device``: ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (the first GPU when torch sees one)."""
    if name == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else CPU
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"run.device={name!r}: expected cpu, cuda, cuda:N or auto") from None
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"run.device={name!r}: expected cpu, cuda, cuda:N or auto")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
            raise ConfigError(
                f"run.device={name!r}, but torch {torch.__version__} ({build}) sees no GPU; "
                "use run.device=cpu or auto"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"run.device={name!r}, but torch sees {torch.cuda.device_count()} GPU(s)")
    return device


def worker_device() -> torch.device:
    """A Ray worker's device: ``cuda`` when Ray gave it a GPU (Ray sets ``CUDA_VISIBLE_DEVICES`` to
    it), else the CPU. A GPU that torch cannot use is an error, not a silent CPU run."""
    import ray

    gpus = ray.get_gpu_ids()
    if not gpus:
        return CPU
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"Ray gave this worker GPU {gpus}, but torch {torch.__version__} cannot use CUDA "
            "(a CPU-only torch on the GPU node?)"
        )
    return torch.device("cuda")


def module_device(module: nn.Module) -> torch.device:
    """The device of a module's first parameter (or buffer); the CPU for an empty module."""
    for tensor in (*module.parameters(), *module.buffers()):
        return tensor.device
    return CPU


def tree_to(tree: Any, device: torch.device | str, copy: bool = False) -> Any:
    """A nest of dicts, lists and tuples with every tensor on ``device`` (``copy``: always copied)."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().to(device, copy=copy)
    if isinstance(tree, dict):
        return {key: tree_to(value, device, copy) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(tree_to(value, device, copy) for value in tree)
    return tree


def to_cpu(tree: Any) -> Any:
    """A detached CPU copy of a nest of tensors. What leaves a worker (weights, checkpoint state)
    goes through this: the driver may have no GPU, and the worker keeps training its own."""
    return tree_to(tree, CPU, copy=True)


def optimizer_to(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Move an optimiser's state (Adam's moments) next to its parameters, in place. Step counts stay
    on the CPU, where torch keeps them for non-capturable optimisers."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if key != "step" and isinstance(value, torch.Tensor) and value.device != device:
                state[key] = value.to(device)


def release_cached_memory(device: torch.device) -> None:
    """Hand the caching allocator's free blocks, and cuBLAS's workspaces (tens of MB, kept per
    stream once a matrix product has run), back to the GPU, so another process can use them."""
    if device.type == "cuda":
        clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear_workspaces is not None:
            clear_workspaces()
        torch.cuda.empty_cache()


def move_placed(
    modules: list[nn.Module],
    optimizers: list[torch.optim.Optimizer],
    device: torch.device,
    home: torch.device,
) -> None:
    """A collocated worker's offload (``device`` the CPU) or onload (``device`` its GPU, ``home``):
    its modules and their optimisers' state, in place. Offloading also frees ``home``'s cached
    blocks, so the worker it shares the GPU with can use them."""
    for module in modules:
        module.to(device)
    for optimizer in optimizers:
        optimizer_to(optimizer, device)
    if device.type == "cpu":
        release_cached_memory(home)
