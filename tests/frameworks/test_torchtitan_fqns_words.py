"""torchtitan's stage-split refusals in the words of the release the file is for:
0.2.2's (a TOML job file) as pptune has said them, main's (a dump) naming its keys and
its _generate_llm_fqn_per_model_part (torchtitan/distributed/pipeline_parallel.py at
b5bcd76)."""

from __future__ import annotations

import pytest

from pptune.frameworks.common.versions import FrameworkRefusal
from pptune.frameworks.torchtitan.fqns import torchtitan_fqns


def test_a_toml_keeps_its_words() -> None:
    """(6 + 6 + 1) // 8 = 1 layer a stage, under the input weight 6."""
    with pytest.raises(FrameworkRefusal) as exc:
        torchtitan_fqns(8, 6, input_weight=6)
    assert str(exc.value) == ("input/output weight (6/1) exceeds minimum layers per stage (1) "
                              "(torchtitan generate_llm_fqn_per_model_part)")


def test_main_checks_the_input_weight_first() -> None:
    """Both over (6 + 2 + 2) // 8 = 1: main raises for the input weight."""
    with pytest.raises(FrameworkRefusal) as exc:
        torchtitan_fqns(8, 6, input_weight=2, output_weight=2, main=True)
    assert exc.value.rule_id == "torchtitan-weights"
    assert "'input_weight (2) exceeds minimum layers per stage (1).'" in str(exc.value)
