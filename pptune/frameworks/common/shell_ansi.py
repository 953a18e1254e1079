"""bash's ANSI-C quoting, ``$'...'``, decoded as bash decodes it.

The escapes are the bash manual's ("ANSI-C Quoting"): ``\\a \\b \\e \\E \\f \\n \\r
\\t \\v \\\\ \\' \\" \\?``, ``\\nnn`` (one to three octal digits), ``\\xHH`` (one or
two hex digits), ``\\uHHHH`` and ``\\UHHHHHHHH`` (one to four / eight hex digits),
``\\cx`` (control-x). What the manual leaves out follows bash 5.2's
``ansicstr`` (lib/sh/strtrans.c), checked against ``bash -c "printf %s $'...'"``:
an unknown escape (``\\z``, ``\\8``, ``\\x`` or ``\\u`` with no digits, ``\\c`` at the
end) keeps its backslash; an octal or ``\\x`` value keeps its low 8 bits
(``\\400`` is 0); ``\\x{HHH}`` takes any number of hex digits; ``\\c?`` is DEL and
``\\c\\\\`` is ``\\x1c``; a NUL (``\\0``, ``\\x00``, ``\\c@``) ends the string, as a C
string ends (``$'a\\0b'c`` is ``ac``). Bytes are decoded as UTF-8 (a UTF-8
locale), an invalid sequence as U+FFFD.
"""

from __future__ import annotations

_SIMPLE = {"a": 7, "b": 8, "e": 27, "E": 27, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11,
           "\\": 92, "'": 39, '"': 34, "?": 63}
_OCTAL = frozenset(b"01234567")
_HEX = frozenset(b"0123456789abcdefABCDEF")


def ansi_c_end(text: str, start: int) -> int:
    """Index after the ``'`` closing the ``$'...'`` whose body starts at ``start``
    (a backslash escapes the next character), or -1 when none does."""
    i = start
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == "'":
            return i + 1
        else:
            i += 1
    return -1


def _digits(data: bytes, i: int, allowed: frozenset[int], most: int | None) -> int:
    """Index after the run of ``allowed`` bytes from ``i``, at most ``most`` of them."""
    j = i
    while j < len(data) and data[j] in allowed and (most is None or j - i < most):
        j += 1
    return j


def _utf8(code: int) -> bytes:
    """bash writes a code point as UTF-8 even when it is no character (a surrogate);
    past U+10FFFF Python has no bytes for it: U+FFFD."""
    return chr(code).encode("utf-8", "surrogatepass") if code <= 0x10FFFF else b"\xef\xbf\xbd"


def _escape(data: bytes, i: int, out: bytearray) -> int:
    """Decode the escape whose letter is ``data[i]`` (after a backslash) into ``out``;
    the index after it."""
    e = data[i]
    i += 1
    letter = chr(e)
    if letter in _SIMPLE:
        out.append(_SIMPLE[letter])
    elif e in _OCTAL:
        end = _digits(data, i, _OCTAL, 2)
        out.append(int(data[i - 1 : end], 8) & 0xFF)
        i = end
    elif letter == "x":
        brace = data[i : i + 1] == b"{"
        end = _digits(data, i + brace, _HEX, None if brace else 2)
        if end == i and not brace:
            out += b"\\x"  # \x with no hex digit is kept as written
            return i
        digits = data[i + brace : end]
        out.append(int(digits, 16) & 0xFF if digits else 0)
        i = end + (brace and data[end : end + 1] == b"}")
    elif letter in "uU":
        end = _digits(data, i, _HEX, 4 if letter == "u" else 8)
        if end == i:
            out += b"\\" + bytes([e])
            return i
        code = int(data[i:end], 16)
        out += bytes([code]) if code <= 0x7F else _utf8(code)
        i = end
    elif letter == "c" and i < len(data):
        x = data[i]
        i += 1 + (x == 92 and data[i + 1 : i + 2] == b"\\")  # $'\c\\' is \x1c
        out.append(0x7F if x == ord("?") else (x - 32 if 97 <= x <= 122 else x) & 0x1F)
    else:
        out += b"\\" + bytes([e])
    return i


def ansi_c(body: str) -> str:
    """The value of ``$'body'`` (``body``: what lies between the quotes)."""
    data = body.encode("utf-8", "replace")
    out = bytearray()
    i = 0
    while i < len(data):
        if data[i] == 92 and i + 1 < len(data):
            i = _escape(data, i + 1, out)
        else:
            out.append(data[i])
            i += 1
    end = out.find(0)
    return bytes(out if end < 0 else out[:end]).decode("utf-8", "replace")
