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


def test_an_evals_unbalanced_quotes_fall_back_to_spaces_with_a_note() -> None:
    """bash checks an eval's text only when it runs it (``bash -n`` passes the script),
    so its unclosed quote is read on spaces with a note; the script's own is refused
    (test_shell_quotes.py)."""
    script = interpret("eval \"run --a 1 \\\"oops\"\n")
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


def test_a_command_kept_in_a_string_then_run_or_evaluated() -> None:
    """CMD="torchrun ${ARGS[@]} ..." joins the array with spaces into one value (bash: no
    word splitting in an assignment); $CMD and eval ${CMD} run it as words, without the
    redirections (NVIDIA's examples/simulation and AMD's Mixtral scripts do both)."""
    script = interpret(
        "A=( --vocab-size 128256 )\n"
        "B=( --simulate-global-step --skip-execute )\n"
        'CMD="torchrun pretrain_gpt.py \\\n  ${A[@]} \\\n  ${B[@]}"\n'
        "$CMD 2>&1 | tee log\n"
        'command="$CMD --seq-length 4096"\n'
        'command="$command > train.log 2>&1"\n'
        "eval ${command}\n"
        'torchrun x.py "${A[@]}"\n')
    assert script.scalars["CMD"] == ("torchrun pretrain_gpt.py   --vocab-size 128256   "
                                     "--simulate-global-step --skip-execute")
    run = ["torchrun", "pretrain_gpt.py", "--vocab-size", "128256", "--simulate-global-step",
           "--skip-execute"]
    assert [c.words for c in script.commands] == [
        run, ["tee", "log"], [*run, "--seq-length", "4096"], ["torchrun", "x.py",
                                                               "--vocab-size", "128256"]]


def test_an_if_the_scripts_own_variables_decide_runs_one_branch() -> None:
    """AMD's train_llama2.sh: TP=8 and FSDP=0 by default, an FSDP branch that sets TP=1;
    a condition on the environment is unknown: every branch, last assignment wins."""
    script = interpret(
        "FSDP=${FSDP:-0}\nTP=8\nSIZE=8x7B\n"
        'if [ "$FSDP" -eq 1 ]; then\n  TP=1\nfi\n'
        'if [[ $SIZE == 8x7B ]]; then L=32\nelif [ "$SIZE" = "70B" ]; then L=80\n'
        "else L=1\nfi\n"
        'if [ "$SIZE" != "8x7B" ]; then A=1; elif [ -n "$SIZE" ]; then A=2; else A=3; fi\n'
        'if [ -z "$WANDB_KEY" ]; then W=off\nelse W=on\nfi\n'
        'if ! test "$TP" -gt 4; then N=small\nelse\n  if [ "$TP" = 8 ]; then N=eight; fi\nfi\n')
    s = script.scalars
    assert (s["TP"], s["L"], s["A"], s["N"]) == ("8", "32", "2", "eight")
    assert s["W"] == "on"  # unknown: both branches read, the last wins
    assert any("is not known without running the script" in n for n in script.notes)


def test_backtick_substitution_is_one_unresolved_word_like_dollar_paren() -> None:
    """`...` is command substitution as $(...) is: one word kept as written, spaces and
    all, never split into '`echo' and '32`'."""
    assert commands("run --num-layers `echo 32` --x \"`date +%s` s\" '`a b`'\n")[0] == [
        "run", "--num-layers", "`echo 32`", "--x", "`date +%s` s", "`a b`"]


def test_here_document_bodies_are_not_statements() -> None:
    """bash reads a here-document's lines as the command's input, up to the line that is
    its delimiter (with <<-, after leading tabs): an apostrophe or a # in them is text,
    and the statements after the delimiter are the script's."""
    text = ("cat > notes.txt <<EOF\nwe don't tune here; $HOME\n# not a comment\nEOF\n"
            "cat <<-'END' >> notes.txt\n\tit's tabbed\n\tEND\n"
            "python - <<< 'print(1)'\n"
            "torchrun pretrain_gpt.py --num-layers 32\n")
    statements = split_statements(text)
    assert statements == [(1, "cat > notes.txt <<EOF"), (5, "cat <<-'END' >> notes.txt"),
                          (8, "python - <<< 'print(1)'"),
                          (9, "torchrun pretrain_gpt.py --num-layers 32")]
    script = interpret(text)
    assert not any("unbalanced" in n for n in script.notes)
    # a shift inside $(( )) is no here-document
    assert split_statements("N=$((1<<2))\nM=3\n") == [(1, "N=$((1<<2))"), (2, "M=3")]
    # a delimiter never found: the body runs to the end of the file, as bash reads it
    assert split_statements("cat <<EOF\nx\ny\n") == [(1, "cat <<EOF")]


def test_an_array_grown_by_many_appends_keeps_every_item() -> None:
    """``ARGS+=(...)`` extends the array in place (its length and characters counted as
    it grows): 20,000 appends had copied and summed the whole array each time, minutes
    for a long generated script; the last append still lands last."""
    from pptune.frameworks.common.shell import interpret

    lines = ["ARGS=(--num-layers 2)"] + [f"ARGS+=(--x{i} {i})" for i in range(20_000)]
    script = interpret("\n".join([*lines, 'run "${ARGS[@]}"']) + "\n")
    words = script.commands[-1].words
    assert len(words) == 1 + 2 + 2 * 20_000
    assert words[:3] == ["run", "--num-layers", "2"] and words[-2:] == ["--x19999", "19999"]
    assert script.array_chars["ARGS"] == sum(len(w) for w in words[1:])
