"""A trial's findings on how bad input is worded: Python's own words (its 4,300-digit
guard, ``True``), the help a usage error points to, and look-alike characters."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from typer.testing import Result

Cli = Callable[..., Result]
ErrorLine = Callable[[Result], str]


def test_a_number_of_thousands_of_digits_is_said_in_words(tmp_path: Path, cli: Cli,
                                                          error_line: ErrorLine) -> None:
    hf = tmp_path / "config.json"
    hf.write_text('{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}")
    line = error_line(cli("recommend", "--gpus", "8", "--hf-config", hf))
    assert line.endswith("is not valid JSON: a number with thousands of digits; expected "
                         "counts like 8 or 512")
    assert "sys.set_int_max_str_digits" not in line


def test_a_yaml_boolean_is_named_as_the_file_spells_it(tmp_path: Path, cli: Cli,
                                                       error_line: ErrorLine) -> None:
    cfg = tmp_path / "job.yaml"
    cfg.write_text("model: llama3-8b\ngpus: 8\npp: 1\nmicro_batch_size: 1\nglobal_batch: 8\n"
                   "seq_len: true\n")
    line = error_line(cli("check-config", cfg))
    assert "seq_len is true: Input should be a valid integer" in line


def test_an_option_without_its_value_points_at_its_commands_help(
        cli: Cli, error_line: ErrorLine) -> None:
    line = error_line(cli("recommend", "--gpus"))
    assert line.endswith("(see pptune recommend --help)")
    line = error_line(cli("recommend", "--bogus"))  # the same whatever the program's name
    assert line.endswith("(see pptune recommend --help)")


def test_a_look_alike_hyphen_in_a_preset_name_is_pointed_at(cli: Cli,
                                                            error_line: ErrorLine) -> None:
    line = error_line(cli("recommend", "--gpus", "8", "--model", "llama3\u20118b"))
    assert "(did you mean llama3-8b? '\u2011' is U+2011, not ASCII)" in line
