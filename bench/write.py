"""Where the benchmarks write their results: one JSON file per benchmark in
bench/results/, stamped with the machine and the date, replaced atomically."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def write_result(name: str, doc: dict[str, Any]) -> None:
    """``bench/results/<name>.json``: ``doc`` under the benchmark's name, machine and date."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": name, "machine": f"{platform.machine()} {platform.python_version()}",
           "date": time.strftime("%Y-%m-%d"), **doc}
    write_json(RESULTS / f"{name}.json", doc)


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """``doc`` as indented JSON at ``path``, replaced atomically (a temporary file, then
    a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)
    print(f"wrote {path}")
