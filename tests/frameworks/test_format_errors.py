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
