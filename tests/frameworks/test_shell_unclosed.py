"""A substitution, expansion or parenthesis left open, which bash refuses and so does
the reader, and the look-alikes bash reads. Each case is worked out by hand from the
bash manual ("Command Substitution", "Parameter Expansion", "Arrays", "Compound
Commands"); where bash is installed it is also put to ``bash -n``, whose words
each case records. bash names the line the construct opens on, except for ``$(``,
``<(`` and a subshell, where it names the end of the file; pptune always names
where it opens."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pptune.frameworks.common.shell import Unclosed, interpret, split_statements

BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="bash is not installed")

MATCH_PAREN = "unexpected EOF while looking for matching `)'"
END_OF_FILE = "syntax error: unexpected end of file"

# (script, line it opens on, what is open, bash -n's words, bash -n's line)
REFUSED = [
    ("A=1\nX=$(echo a\nB=2\n", 2, "$(", MATCH_PAREN, 4),
    ("A=1\nX=${VAR:-a\nB=2\n", 2, "${", "unexpected EOF while looking for matching `}'", 2),
    ("A=1\nX=`echo a\nB=2\n", 2, "`", "unexpected EOF while looking for matching ``'", 2),
    ("A=1\nARGS=(\n  --x 1  # a comment\n  --y 2\n", 2, "(", MATCH_PAREN, 2),
    ("A=1\n( cd /tmp\nB=2\n", 2, "(", END_OF_FILE, 4),
    ("N=$(( 2 * (3 + 1)\nB=2\n", 1, "$((", MATCH_PAREN, 1),
    ("(( N = 2 + 1\nB=2\n", 1, "((", MATCH_PAREN, 1),
    ('X=$(echo "$(date)" ${A:-x}\n', 1, "$(", MATCH_PAREN, 2),  # the inner ones close
    ("X=${VAR:-$(hostname}\n", 1, "$(", MATCH_PAREN, 2),  # } inside $( ) closes nothing
    ('X="$(echo a\n', 1, "$(", MATCH_PAREN, 2),  # inside "...": the $( is innermost
    ('X="$(echo a"\n', 1, '"', "unexpected EOF while looking for matching `\"'", 1),
    ("X=${A:-{a\n", 1, "${", "unexpected EOF while looking for matching `}'", 1),
    ("diff <(ls\n", 1, "(", MATCH_PAREN, 2),
    ("X=$(case $x in a) echo 1;; esac\n", 1, "$(", MATCH_PAREN, 2),  # a) is a pattern
    ("( case $x in a) echo ;; esac\n", 1, "(", END_OF_FILE, 2),
    ("X=$(echo a; (echo b\n", 1, "(", MATCH_PAREN, 2),  # in $( ) bash says matching
    ("X=$(echo `echo a)\n", 1, "`", "unexpected EOF while looking for matching ``'", 1),
]


@pytest.mark.parametrize(("text", "line", "opener", "said", "bash_line"), REFUSED)
def test_a_construct_never_closed_is_refused_where_it_opens(
        text: str, line: int, opener: str, said: str, bash_line: int) -> None:
    with pytest.raises(Unclosed) as info:
        split_statements(text)
    assert (info.value.line, info.value.opener) == (line, opener)
    message = str(info.value)
    assert message.startswith(f"line {line}: the {opener} ")
    assert said in message
    assert "\n" not in message


def bash_says(tmp_path: Path, text: str) -> tuple[int, str] | None:
    """(line, words) of bash -n's refusal, None when it reads the script."""
    assert BASH is not None
    path = tmp_path / "s.sh"
    path.write_text(text)
    done = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True,
                          env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"})
    if done.returncode == 0:
        return None
    found = re.match(r".*?: line (\d+): (.*)", done.stderr)
    assert found, done.stderr
    return int(found.group(1)), found.group(2)


@needs_bash
@pytest.mark.parametrize(("text", "line", "opener", "said", "bash_line"), REFUSED)
def test_bash_refuses_them_in_the_same_words(tmp_path: Path, text: str, line: int,
                                             opener: str, said: str, bash_line: int) -> None:
    assert bash_says(tmp_path, text) == (bash_line, said)


# scripts bash reads whose brackets could be miscounted
ACCEPTED = [
    'X=$(echo "$(dirname "$(pwd)")" $(( 1 + $(echo 2) )))\n',
    "X=${VAR:-$(hostname)}\nY=\"${VAR:-$(echo '}')}\"\n",
    "ARGS=(\n  --x 1  # the ( here is a comment\n  --y \"(\"  # so is this )\n"
    "  $(echo z)\n)\nARGS+=( --z 2 )\ndeclare -a B=(\n  1\n)\n",
    "X=$(cat <<EOF\n( not closed in here\nEOF\n)\ncat <<'E'\n$(\nE\n",
    "case $x in\n  a) echo 1 ;;\n  (b|c) echo 2 ;;\nesac\n",
    'X="$(case a in a) echo "it\'s";; esac)"\n',
    'X=$(case $x in (a) echo "(";; b|c) echo 2;; esac)\n',
    "X=$(case $x in a) case $y in b) echo;; esac;; esac)\n",
    "X=$(case $x in\n a) echo 1\nesac)\n( case $y in b) echo ;; esac )\n",
    "N=$((2 * (3 + 4)))\n(( N++ ))\nfor ((i = 0; i < 2; i++)); do echo; done\n",
    "X=$((echo a) | cat)\n",  # bash reads $((a) b) again as $( (a) b)
    "echo \\( a \\) \\$\\( \\`\n",
    "echo \"(\" ')' \"$\\(\" '${' \"\\`\" # ( ${ $( `\n",
    "X=${A:-{a}\nY=${A:-{a} ; echo b}\n",  # ${ } ends at the first }: b} is a word
    "X=`echo $(echo a`\n",  # a backtick's text is read only when it runs
    "f() (\n  echo a\n)\ndiff <(ls) >(cat)\n",
    'eval "X=\\$(echo a"\n',  # bash checks an eval's text only when it runs it
]


@pytest.mark.parametrize("text", ACCEPTED)
def test_brackets_bash_accepts_are_not_refused(text: str) -> None:
    split_statements(text)  # no Unclosed
    interpret(text)


@needs_bash
@pytest.mark.parametrize("text", ACCEPTED)
def test_bash_accepts_them_too(tmp_path: Path, text: str) -> None:
    assert bash_says(tmp_path, text) is None


def test_a_case_pattern_inside_a_substitution_closes_nothing() -> None:
    """The a) of a case inside $( ) is a pattern: the statement runs to the esac's )."""
    assert split_statements("X=$(case $x in a) echo 1;; esac) ; run 2\n") == [
        (1, "X=$(case $x in a) echo 1;; esac)"), (1, "run 2")]
    assert split_statements("X=${A:-{a} ; echo b}\n") == [(1, "X=${A:-{a}"), (1, "echo b}")]

