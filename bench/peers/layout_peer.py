"""megatron-core's own layout parser against pptune's (part of ``make peers``).

megatron-core 0.16.1's ``PipelineParallelLayerLayout``
(megatron/core/transformer/pipeline_parallel_layer_layout.py), imported and
run: ``parse_str_to_list`` on each string, then the class itself for ``pp``
and ``validate_layer_layout(num_layers, mtp_num_layers)``; pptune's
``layout_grammar.parse_layout`` on the same. The strings: NVIDIA's recipe
layouts, layouts pptune's writer makes from random stages, random strings of
the grammar's pieces (counts, groups, commas, empty stages) and hostile ones.

For each string: both verdicts (accepted, or the refusal), both stage lists,
and whether they agree. pptune refuses on purpose some strings megatron-core
reads (a count of 0, which megatron-core drops; a count after a count; a
group without a count, whose parentheses megatron-core then calls invalid
characters): those are counted apart as ``pptune_stricter``.
Prints one JSON document on stdout.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

RECIPES = [
    ("Et*2|(t*2|)*34,t*3|(t*2|)*3,tL", 8, 80, 0),  # Llama-3-70B FP8 (Megatron-Bridge)
    ("Et|(tt|)*30mL", 8, 61, 1),  # DeepSeek-V3 with its MTP layer
    ("Et|(tt|)*30L", 8, 60, 0),  # Kimi-K2 (Megatron-Bridge perf_recipes/kimi)
    ("Ettt|(tt|)*29,m|L", 8, 61, 1),  # megatron-core's docstring example
    ("E|(t|)*3,m|m||L", 2, 3, 2),  # Megatron-LM's --help example
]
HOSTILE = ["Et|tx|tL", "Et|(tt|tL", "Et|tt)|tL", "Et*0|tL", "E((t|)*2)*2|L", "Et*|tL",
           "(tt)|L", "E|*3L", "Et**2|L", "Et|t2|L", "", "|", "EL", "tE|L", "Et|Lt", "ELL",
           "Et|tt|mtL", "Em|tL"]


def _megatron(text: str, pp: int, layers: int, mtp: int) -> dict[str, Any]:
    from megatron.core.transformer.pipeline_parallel_layer_layout import (
        PipelineParallelLayerLayout,
    )

    try:
        stages = PipelineParallelLayerLayout.parse_str_to_list(text)
    except Exception as exc:  # its refusal
        return {"reads": False, "accepted": False, "error": f"{type(exc).__name__}: {exc}"[:200]}
    letters = ["".join(_letter(t) for t in stage) for stage in stages]
    try:
        layout = PipelineParallelLayerLayout(text, pp)
        layout.validate_layer_layout(num_layers=layers, mtp_num_layers=mtp or None)
    except Exception as exc:
        return {"reads": True, "accepted": False, "stages": letters,
                "error": f"{type(exc).__name__}: {exc}"[:200]}
    return {"reads": True, "accepted": True, "stages": letters}


def _letter(layer_type: Any) -> str:
    return {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}[layer_type.name]


def _pptune(text: str, pp: int, layers: int, mtp: int) -> dict[str, Any]:
    from pptune.costmodel.layout_grammar import LayoutError, expand, parse_layout

    try:
        read = expand(text)
    except LayoutError as exc:
        return {"reads": False, "accepted": False, "error": exc.problem[:200]}
    letters = ["".join(ch for ch, _ in stage) for stage in read]
    try:
        parse_layout(text, pp, num_layers=layers, mtp_layers=mtp)
    except LayoutError as exc:
        return {"reads": True, "accepted": False, "stages": letters, "error": exc.problem[:200]}
    return {"reads": True, "accepted": True, "stages": letters}


def _generated(rng: random.Random, n: int) -> list[tuple[str, int, int, int]]:
    """Layouts pptune's writer makes from random stages (they must read back)."""
    from pptune.costmodel.layout_grammar import LayerKind, stages_from_counts, write_layout

    out = []
    for _ in range(n):
        pp = rng.choice([1, 2, 4, 8])
        vp = rng.choice([1, 1, 2, 3, 5])
        counts = [rng.choice([0, 1, 2, 2, 2, 3, 4]) for _ in range(pp * vp)]
        mtp = rng.choice([0, 0, 1])
        stages = stages_from_counts(counts, mtp)
        layers = sum(stage.count(LayerKind.DECODER) for stage in stages)
        out.append((write_layout(stages), pp, layers, mtp))
    return out


def _random(rng: random.Random, n: int) -> list[tuple[str, int, int, int]]:
    """Strings of the grammar's pieces, valid or not."""
    pieces = ["t", "t", "t", "tt", "|", "|", ",", "t*2", "t*3", "(tt|)*2", "(t|)*3", "||", "m"]
    out = []
    for _ in range(n):
        body = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 10)))
        text = "E" + body + "L"
        pp = rng.choice([1, 2, 4])
        out.append((text, pp, text.replace(",", "").count("t"), 0))
    return out


def main() -> None:
    rng = random.Random(21)
    cases = ([("recipe", *c) for c in RECIPES]
             + [("hostile", text, 2, 2, 0) for text in HOSTILE]
             + [("generated", *c) for c in _generated(rng, 300)]
             + [("random", *c) for c in _random(rng, 300)])
    rows = []
    for kind, text, pp, layers, mtp in cases:
        ours, theirs = _pptune(text, pp, layers, mtp), _megatron(text, pp, layers, mtp)
        same_stages = ours.get("stages") == theirs.get("stages") if ours["reads"] else None
        agrees = ours["accepted"] == theirs["accepted"] and same_stages is not False
        stricter = not ours["reads"] and theirs["reads"]
        rows.append({"kind": kind, "layout": text, "pp": pp, "num_layers": layers, "mtp": mtp,
                     "pptune": ours, "megatron_core": theirs, "agrees": agrees,
                     "pptune_stricter": stricter})
    summary: dict[str, Any] = {}
    for kind in ("recipe", "hostile", "generated", "random"):
        mine = [r for r in rows if r["kind"] == kind]
        summary[kind] = {"strings": len(mine), "agree": sum(r["agrees"] for r in mine),
                         "pptune_stricter": sum(r["pptune_stricter"] for r in mine),
                         "disagree_otherwise": sum(not r["agrees"] and not r["pptune_stricter"]
                                                   for r in mine)}
    keep = [r for r in rows if r["kind"] in ("recipe", "hostile") or not r["agrees"]]
    json.dump({"summary": summary, "cases": keep}, sys.stdout)


if __name__ == "__main__":
    main()
