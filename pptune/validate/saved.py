"""Peak bytes of tensors saved for backward on one rank, live over a step.

``torch.autograd.graph.saved_tensors_hooks`` sees every tensor autograd saves
(``pack``) and hands it back at backward (``unpack``). ``pack`` wraps the
tensor in a small holder; autograd drops the holder when it frees the saved
tensor (after the backward that used it, or with the graph), and a
``weakref.finalize`` on the holder releases its bytes. Bytes count once per
storage (a tensor saved by two ops, or two views of one buffer, count once)
and never for parameters or buffers, as ``pptune probe`` counts a layer's
``act_bytes``; the peak is the most bytes alive at once, the figure the
simulator predicts per device (``peak_activation_bytes``).

torch is passed in: importing this module does not import torch.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any


class _Held:
    __slots__ = ("__weakref__", "tensor")

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor


class SavedTensorPeak:
    """Context manager: ``with tracker: step()``; then ``tracker.peak_bytes``."""

    def __init__(self, torch: Any, exclude_ptrs: set[int]) -> None:
        self._torch = torch
        self._exclude = exclude_ptrs
        self._lock = threading.Lock()
        self._refs: dict[tuple[str, int], int] = {}
        self._size: dict[tuple[str, int], int] = {}
        self.live_bytes = 0
        self.peak_bytes = 0
        self._hooks: Any = None

    def reset(self) -> None:
        with self._lock:
            self.peak_bytes = self.live_bytes

    def _pack(self, t: Any) -> Any:
        try:
            storage = t.untyped_storage()
            key, nbytes = (str(t.device), storage.data_ptr()), storage.nbytes()
        except (RuntimeError, NotImplementedError, AttributeError):
            return t  # no plain storage: not counted
        if key[1] in self._exclude or nbytes == 0:
            return t
        held = _Held(t)
        with self._lock:
            if self._refs.get(key, 0) == 0:
                self._size[key] = nbytes
                self.live_bytes += nbytes
                self.peak_bytes = max(self.peak_bytes, self.live_bytes)
            self._refs[key] = self._refs.get(key, 0) + 1
        weakref.finalize(held, self._release, key)
        return held

    def _release(self, key: tuple[str, int]) -> None:
        with self._lock:
            self._refs[key] -= 1
            if self._refs[key] == 0:
                del self._refs[key]
                self.live_bytes -= self._size.pop(key)

    @staticmethod
    def _unpack(held: Any) -> Any:
        return held.tensor if isinstance(held, _Held) else held

    def __enter__(self) -> SavedTensorPeak:
        self._hooks = self._torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hooks.__exit__(*exc)


def parameter_ptrs(modules: list[Any]) -> set[int]:
    """Storage addresses of every parameter and buffer (never counted as saved)."""
    from pptune.probe.layers import storage_ptrs

    return storage_ptrs(*modules)
