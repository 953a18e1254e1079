"""The bash subset behind the Megatron-LM reader, on its own (nothing is executed)."""

from __future__ import annotations

from pptune.frameworks.common.shell import interpret, split_statements
from pptune.frameworks.megatron.flags import parse_flags


def commands(text: str) -> list[list[str]]:
    return [c.words for c in interpret(text).commands]


def test_statements_join_continuations_drop_comments_and_keep_arrays_whole() -> None:
    text = ("# header\nA=1 # trailing\nARGS=(\n  --x 1 # why (not)\n  --y 2\n)\n"
            "cmd \\\n  --z 3; other && third | tee log\n")
    assert split_statements(text) == [
        (2, "A=1"),
        (3, "ARGS=(   --x 1    --y 2 )"),
        (7, "cmd   --z 3"),
        (8, "other"),
        (8, "third"),
        (8, "tee log"),
    ]


def test_hash_inside_words_and_quotes_is_not_a_comment() -> None:
    script = interpret("A='x # y'\nB=\"${#A}\"\nC=a#b\n")
    assert script.scalars["A"] == "x # y"
    assert script.scalars["C"] == "a#b"


def test_assignments_exports_and_appends() -> None:
    script = interpret("export PP=4 TP=2\nGBS=512\nGBS+=0\ndeclare -a L=(a b)\nL+=(c)\n")
    assert script.scalars == {"PP": "4", "TP": "2", "GBS": "5120"}
    assert script.arrays == {"L": ["a", "b", "c"]}


def test_expansions() -> None:
    text = ('N=2\nG=8\nW=$((N * G))\nD=${UNSET:-7}\nE=${N:-9}\nS="a b"\nARR=(x "y z")\n'
            'run $W $D $E $S "$S" "${ARR[@]}" ${ARR[1]} "${ARR[*]}" $ARR\n')
    script = interpret(text)
    assert commands(text)[-1] == ["run", "16", "7", "2", "a", "b", "a b", "x", "y z", "y", "z",
                                  "x y z", "x"]
    assert script.defaults_used == {"UNSET": "7"}


def test_bash_integer_division_truncates_toward_zero() -> None:
    script = interpret("A=$((7 / 2))\nB=$((-7 / 2))\nC=$((-7 % 3))\nD=$((2 ** 64))\n")
    assert (script.scalars["A"], script.scalars["B"], script.scalars["C"]) == ("3", "-3", "-1")
    assert script.scalars["D"] == "$((2 ** 64))"  # power is not evaluated: left as written


def test_unknowns_stay_as_written_single_words() -> None:
    words = commands('run $1 "$HOME/x y" $(date +%s) `hostname` ${X/a/b}\n')[0]
    assert words == ["run", "$1", "$HOME/x y", "$(date +%s)", "`hostname`", "${X/a/b}"]


def test_single_quotes_are_literal_and_escapes_survive() -> None:
    assert commands("A=5\nrun '$A' \"\\$A\" \\$A \"say \\\"hi\\\"\"\n")[0] == [
        "run", "$A", "$A", "$A", 'say "hi"']


def test_values_with_quotes_do_not_break_later_statements() -> None:
    assert commands("Q='it'\"'\"'s'\nrun $Q \"$Q\"\n")[0] == ["run", "it's", "it's"]


def test_keywords_and_control_flow_run_in_order() -> None:
    script = interpret('if [ -z "$PP" ]; then\n  PP=2\nelse\n  PP=8\nfi\nunset X\n')
    assert script.scalars["PP"] == "8"  # both branches run: the last assignment wins


def test_unbalanced_quotes_fall_back_to_spaces_with_a_note() -> None:
    script = interpret('run --a 1 "oops\n')
    assert script.commands[0].words == ["run", "--a", "1", '"oops']
    assert script.notes == ["line 1: unbalanced quotes; split on spaces"]


def test_parse_flags_values_bools_and_unknowns() -> None:
    flags = parse_flags(["--num-layers=32", "--bf16", "--lr", "1e-4", "--micro-batch-size", "-3",
                         "positional", "--no-value", "--num-layers", "40"])
    assert flags.values["--num-layers"] == ["32", "40"]
    assert flags.values["--bf16"] == [None]
    assert flags.values["--micro-batch-size"] == ["-3"]
    assert flags.unknown == ["--lr", "--no-value"]


def test_a_list_flag_stops_at_the_scripts_own_arguments() -> None:
    # a script ends with "$@" (what it was called with): not a recompute module
    flags = parse_flags(["--recompute-modules", "moe_act", "mlp", "$@"])
    assert flags.values["--recompute-modules"] == ["moe_act mlp"]
    flags = parse_flags(["--cp-comm-type", "a2a", "${@}", "--num-layers", "4"])
    assert flags.values["--cp-comm-type"] == ["a2a"]
