"""Lazy imports of the optional packages (torch, pynvml), with the install hint.

``import pptune`` never imports torch: probe and validate call
``import_torch`` inside the functions that need it, and a machine without it
gets one line naming the pip command instead of a traceback.
"""

from __future__ import annotations

import importlib
from typing import Any

from pptune.errors import MissingDependency

# The Makefile pins torch==2.13.0 (the CPU wheel this machine carries).
INSTALL_HINT = "pip install 'pptune[probe]' (torch==2.13.0 on this machine)"


def import_torch(command: str, *submodules: str) -> Any:
    """Return the ``torch`` module (and import ``submodules`` of it), or raise
    MissingDependency naming ``command`` and the pip command."""
    try:
        import torch

        for name in ("torch.distributed", *submodules):
            importlib.import_module(name)
    except ImportError as exc:
        raise MissingDependency(
            f"pptune {command} needs torch ({exc.name or 'torch'} is not installed): {INSTALL_HINT}"
        ) from None
    return torch


def import_pynvml(command: str, purpose: str) -> Any:
    """Return the ``pynvml`` module (package nvidia-ml-py), or raise
    MissingDependency naming ``command``, what it needs NVML for, and the pip command."""
    try:
        import pynvml
    except ImportError:
        raise MissingDependency(
            f"pptune {command} needs nvidia-ml-py {purpose}: pip install nvidia-ml-py"
        ) from None
    return pynvml
