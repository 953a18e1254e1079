"""A file named .toml that does not parse gets TOML's own error, not JSON's (a table
header starts like a JSON list) nor "cannot tell the format"."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.errors import BadInput
from pptune.frameworks.read import read_config


@pytest.mark.parametrize("text", ["[model]\nflavor = 70B\n", "# a comment\n[model]\nflavor = 70B\n"])
def test_a_broken_toml_file_gets_the_toml_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "job.toml"
    path.write_text(text)
    with pytest.raises(BadInput, match=r"is not valid TOML: .*line"):
        read_config(path)


def test_a_deepspeed_config_without_a_precision_trains_in_fp32(tmp_path: Path) -> None:
    """DeepSpeed's default without bf16/fp16 sections is FP32 (check-config then warns
    precision-fp32 and prices BF16)."""
    path = tmp_path / "ds.json"
    path.write_text('{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1}')
    assert read_config(path, gpus=8).config.precision == "fp32"
