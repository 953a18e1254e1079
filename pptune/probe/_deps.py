"""Lazy imports of the heavy optional packages, with the install hint."""

from __future__ import annotations

from typing import Any

from pptune.errors import MissingDependency

INSTALL_HINT = "pip install 'pptune[probe]' (torch==2.13.0 on this machine)"


def import_torch() -> Any:
    """Return the ``torch`` module, or raise MissingDependency with the pip command."""
    try:
        import torch
        import torch.distributed
    except ImportError as exc:
        raise MissingDependency(
            f"pptune probe needs torch ({exc.name or 'torch'} is not installed): {INSTALL_HINT}"
        ) from None
    return torch


def import_pynvml() -> Any:
    """Return the ``pynvml`` module (package nvidia-ml-py)."""
    try:
        import pynvml
    except ImportError:
        raise MissingDependency(
            "pptune probe needs nvidia-ml-py for the GPU inventory: pip install nvidia-ml-py"
        ) from None
    return pynvml
