"""The one table of framework adapters: check-config and ``recommend --emit`` look
a framework up here, never branch on its name.

Adding a framework is a folder under ``pptune/frameworks/`` with its
``adapter.py`` (reader, rules per release, closest plan, writer) and one
entry below. The order is the order names are listed in messages
(``--format-in pptune|deepspeed|megatron|torchtitan``).
"""

from __future__ import annotations

from enum import Enum

from pptune.frameworks.common.adapter import Adapter
from pptune.frameworks.common.versions import SHARED_KEYS, VersionKey
from pptune.frameworks.deepspeed.adapter import ADAPTER as DEEPSPEED
from pptune.frameworks.megatron.adapter import ADAPTER as MEGATRON
from pptune.frameworks.pptune.adapter import ADAPTER as PPTUNE
from pptune.frameworks.torchtitan.adapter import ADAPTER as TORCHTITAN


class Framework(str, Enum):
    """A framework pptune reads configs of and writes plans for."""

    PPTUNE = "pptune"
    DEEPSPEED = "deepspeed"
    MEGATRON = "megatron"
    TORCHTITAN = "torchtitan"


ADAPTERS: dict[Framework, Adapter] = {
    Framework.PPTUNE: PPTUNE,
    Framework.DEEPSPEED: DEEPSPEED,
    Framework.MEGATRON: MEGATRON,
    Framework.TORCHTITAN: TORCHTITAN,
}

NAMES = tuple(f.value for f in Framework)
# every --framework-version key: the frameworks' own, then the libraries they share
VERSION_KEYS: tuple[VersionKey, ...] = (
    *(key for a in ADAPTERS.values() for key in a.versions), *SHARED_KEYS)


def find(name: Framework | str) -> Adapter | None:
    """The adapter of the framework called ``name`` exactly, or None."""
    try:
        return ADAPTERS[Framework(name)]
    except ValueError:
        return None


def adapter_of(source_format: str) -> Adapter:
    """The adapter whose reader produced a config (TrainingConfig.source_format); a
    config no reader produced is judged as pptune's own."""
    return find(source_format) or ADAPTERS[Framework.PPTUNE]
