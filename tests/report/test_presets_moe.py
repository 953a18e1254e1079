"""pptune presets shows a mixture of experts' shape and says what its params count."""

from __future__ import annotations

from pptune.report.fit import fit
from pptune.report.presets import presets_tables
from pptune.report.render import render_plain


def test_experts_and_the_mtp_module_are_shown_at_80_columns() -> None:
    text = "\n".join(render_plain(fit(t, 80), width=80) for t in presets_tables())
    assert max(len(line) for line in text.splitlines()) <= 80
    flat = " ".join(text.split())
    assert "experts 128x768 top-8" in flat  # qwen3-30b-a3b
    assert "experts 256x2048 top-8 +shared 2048" in flat  # deepseek-v3
    assert ("params include multi-token-prediction blocks: deepseek-v3 671.03B without "
            "its 1") in flat
