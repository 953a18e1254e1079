"""Quoting in the bash subset: ANSI-C ``$'...'``, ``$"..."``, and a quote left open,
which bash refuses and so does the reader. Expected values are worked out by hand
from the bash manual ("Quoting", "ANSI-C Quoting"); where bash is installed each
case is also put to bash itself (``bash -n`` for refusals, ``printf %s`` for values)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pptune.errors import BadInput
from pptune.frameworks.common.shell import Unclosed, interpret, split_statements
from pptune.frameworks.common.shell_ansi import ansi_c
from pptune.frameworks.read import read_config

BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="bash is not installed")

# $'...' bodies and their values, from the manual's table of escapes
ANSI = [
    (r"/data/my\tcorpus", "/data/my\tcorpus"),
    (r"a\nb\\c\'d\"e\?", "a\nb\\c'd\"e?"),
    (r"\a\b\e\E\f\r\v", "\a\b\x1b\x1b\f\r\v"),
    (r"\101\0101\7x", "A\x081\x07x"),  # one to three octal digits: \0101 is \010 then 1
    (r"\x41\x4g\x", "A\x04g\\x"),  # one or two hex digits; none keeps \x as written
    (r"\x{414243}", "C"),  # bash's \x{...}: any number of digits, the low 8 bits kept
    (r"\xc3\xa9", "é"),  # bytes, read as UTF-8
    (r"\u00e9\u0041\u12345\U0001F600\u", "éAሴ5😀\\u"),  # \u: at most 4 digits
    (r"\cA\ca\c?\c[\c\\y\c", "\x01\x01\x7f\x1b\x1cy\\c"),  # \cx: control-x
    (r"\z\8", "\\z\\8"),  # no such escape: the backslash stays
    (r"a\0b", "a"),  # a NUL ends the string, as a C string ends
    (r"\400x", ""),  # \400 keeps its low 8 bits: a NUL
]


def bash_value(body: str) -> str | None:
    """What bash makes of $'body' (None without bash or a UTF-8 locale)."""
    if BASH is None:
        return None
    env = {"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"}
    probe = subprocess.run([BASH, "-c", "printf %s $'\\u00e9'"], capture_output=True, env=env)
    if probe.stdout != "é".encode():
        return None
    done = subprocess.run([BASH, "-c", f"printf %s $'{body}'"], capture_output=True, env=env)
    return done.stdout.decode("utf-8", "replace")


@pytest.mark.parametrize(("body", "value"), ANSI)
def test_ansi_c_escapes(body: str, value: str) -> None:
    assert ansi_c(body) == value
    from_bash = bash_value(body)
    assert from_bash is None or from_bash == value


def test_ansi_c_and_locale_quotes_in_a_script() -> None:
    """$'...' is one word, spaces and tabs included, outside double quotes and in a
    ${X:-...} default; inside "..." it is literal; $"..." reads as "..."."""
    script = interpret(
        "ARGS=$'--tp 2'\nQ=$'it\\'s'\nX=4\n"
        "run --data-path $'/data/my\\tcorpus' $ARGS \"$'x'\" $\"a $X\" A$'\\x41'B\n"
        "run ${U:-$'a\\tb'} \"${U:-$'c\\td'}\" $(echo $'it\\'s')\n")
    assert script.scalars["ARGS"] == "--tp 2"
    assert script.scalars["Q"] == "it's"
    assert [c.words for c in script.commands] == [
        ["run", "--data-path", "/data/my\tcorpus", "--tp", "2", "$'x'", "a 4", "AAB"],
        ["run", "a\tb", "c\td", "$(echo $'it\\'s')"]]


QUOTED = r"""#!/bin/bash
# it's a launch script with the quotes bash pairs up
DIR="$(dirname "$0")"
cat > notes.txt <<END
don't read this as a quote
END
PP=$'--pipeline-model-parallel-size 4'
N=$(( "16" * 2 ))
torchrun pretrain_gpt.py $PP --num-layers $N --hidden-size $'\x34096' \
  --num-attention-heads 32 --seq-length 2048 --max-position-embeddings 2048 \
  --micro-batch-size 1 --global-batch-size 64 --bf16 --data-path "$DIR/data" \
  --wandb-exp-name $'it\'s' # isn't it
"""


def test_quoted_arguments_reach_the_config(tmp_path: Path) -> None:
    """$'...' values and arithmetic on a double-quoted number are read, and nothing is
    said of quotes (a here-document, a comment and $'...' hold the apostrophes)."""
    path = tmp_path / "run.sh"
    path.write_text(QUOTED)
    result = read_config(path)
    config = result.config
    assert (config.pp, config.num_layers, config.hidden_size) == (4, 32, 4096)
    assert not any("quote" in note for note in result.notes), result.notes

# scripts bash refuses: (text, line the quote opens on, the quote)
REFUSED = [
    ('run --a 1 "oops\n', 1, '"'),
    ("A=1\nB=2\necho 'abc\nfoo\nbar\n", 3, "'"),
    ("A=1\nX=$(echo 'abc\nfoo\n", 2, "'"),
    ("echo 'a'\"b\n\nc\n", 1, '"'),
    ("echo $'it\\'s\n", 1, "$'"),  # \' is a quote escaped inside $'...'
    ('echo $"a\n', 1, '"'),
    ("echo hi#it's\n", 1, "'"),  # a # inside a word begins no comment
    ('echo `echo "a`"\n', 1, '"'),  # a backtick ends at the next backtick
    ("echo \"${var//'/x}\"\n", 1, "'"),  # in ${ } a ' quotes, even inside "..."
    ("N=$(( 1 ' ))\n", 1, "'"),
    ("cat <<EOF\nit's\nEOF\necho \"x\n", 4, '"'),  # after the body: the script's own
    ('ARGS=(\n  --x "a\n  --y 2\n)\n', 2, '"'),
    ("echo \"`echo hi\n", 1, "`"),
]


def bash_refusal(tmp_path: Path, text: str) -> tuple[int, str] | None:
    """(line, quote) of bash -n's "unexpected EOF while looking for matching" (None
    when it accepts the script); pytest.skip without bash."""
    if BASH is None:
        pytest.skip("bash is not installed")
    path = tmp_path / "s.sh"
    path.write_text(text)
    done = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True,
                          env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"})
    found = re.search(r"line (\d+): unexpected EOF while looking for matching `(.)'",
                      done.stderr)
    assert done.returncode == 0 or found, done.stderr
    return (int(found.group(1)), found.group(2)) if found else None


@pytest.mark.parametrize(("text", "line", "quote"), REFUSED)
def test_a_quote_never_closed_is_refused_where_it_opens(text: str, line: int,
                                                        quote: str) -> None:
    with pytest.raises(Unclosed) as info:
        split_statements(text)
    assert (info.value.line, info.value.opener) == (line, quote)


@needs_bash
@pytest.mark.parametrize(("text", "line", "quote"), REFUSED)
def test_bash_refuses_the_same_scripts_at_the_same_line(tmp_path: Path, text: str, line: int,
                                                        quote: str) -> None:
    assert bash_refusal(tmp_path, text) == (line, quote[-1])


# scripts bash reads, whose quotes could be miscounted
ACCEPTED = [
    'D="$(dirname "$0")"\n',
    'T="$(echo "it\'s")"\n',
    "cat <<EOF\nwe don't\nEOF\ncat <<-'END'\n\tit's\n\tEND\n",
    "cat <<\\EOF\ndon't\nEOF\ncat <<\"E'F\"\nx\nE'F\n",
    "X=$(cat <<EOF\nit's\nEOF\n)\n",
    "cat <<EOF\na\\\nEOF\nit's\n",  # a\ goes on into the next line: no delimiter, body to the end
    "# don't\necho hi # it's\nA=(\n  --x 1 # don't\n)\n",
    "X=$'it\\'s' Y=$\"it's\"\n",
    "echo a\\'b \"a\\\"b\"\n",
    'N=$(( "$A" + 1 ))\nM=$(( 1 << 2 ))\n',
    "Z=${var//\\'/x}\nW=\"${var//\\'/x}\"\n",
    "M=\"${X:-'a}'}\"\nK=${X:-'a b'}\n",
    'echo "$\'x" "<<EOF" $$\'a b\'\n',
    "case $x in\n  a) echo \"it's\";;\nesac\n",
    'eval "run \\"a"\n',  # bash checks an eval's text only when it runs it
    "echo \"`echo 'a`\"\n",
]


@pytest.mark.parametrize("text", ACCEPTED)
def test_quotes_bash_accepts_are_not_refused(text: str) -> None:
    split_statements(text)  # no Unclosed
    interpret(text)


@needs_bash
@pytest.mark.parametrize("text", ACCEPTED)
def test_bash_accepts_them_too(tmp_path: Path, text: str) -> None:
    assert bash_refusal(tmp_path, text) is None


def test_here_document_delimiters_lose_their_quotes() -> None:
    """<<\\EOF and <<"E'F" end at the lines EOF and E'F; in an unquoted delimiter's body a
    line ending in one backslash runs on into the next (a\\ + EOF is aEOF, no end)."""
    assert split_statements("cat <<\\EOF\nx\nEOF\nrun 1\n") == [(1, "cat <<\\EOF"),
                                                                (4, "run 1")]
    assert split_statements("cat <<EOF\na\\\\\nEOF\nrun 1\n") == [(1, "cat <<EOF"),
                                                                  (4, "run 1")]
    assert split_statements("cat <<EOF\na\\\nEOF\nEOF\nrun 1\n") == [(1, "cat <<EOF"),
                                                                      (5, "run 1")]
    assert split_statements("cat <<'EOF'\na\\\nEOF\nrun 1\n") == [(1, "cat <<'EOF'"),
                                                                   (4, "run 1")]


def test_the_reader_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "run.sh"
    path.write_text("PP=4\n# it's fine here\ntorchrun pretrain_gpt.py --pp $PP \\\n"
                    "  --data-path '/data/x \\\n  --num-layers 32\n")
    with pytest.raises(BadInput) as info:
        read_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: line 4: the ' opened here is never closed")
    assert "\n" not in message


def test_double_quotes_in_arithmetic_are_removed() -> None:
    """bash's arithmetic expansion removes quotes: $(( "$X" + 1 )) is X + 1."""
    script = interpret('X=4\nA=$(( "16" * 2 ))\nB=$(( "$X" + 1 ))\n')
    assert (script.scalars["A"], script.scalars["B"]) == ("32", "5")
