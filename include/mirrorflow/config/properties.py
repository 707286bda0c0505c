"""Reader for ``.properties`` files with the syntax of ``java.util.Properties.load``.

MirrorMaker 2 reads mm2.properties with ``java.util.Properties``; parsing the same text the same way
keeps one file usable by both. One deliberate difference: a key given twice is an error (Java keeps
the last value silently, which hides copy-paste mistakes).

Invariants of the result: keys are unescaped and never contain unescaped separators; values keep
their trailing whitespace exactly as Java does (trimming is the consumer's business, as in Kafka's
``ConfigDef``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from mirrorflow.errors import ConfigError

# Java's line terminators; str.splitlines would also split on \v, \x1c, \u2028 and others.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_WHITESPACE = " \t\f"
_KEY_SEPARATORS = "=:"
_ESCAPE = re.compile(r"\\(u[0-9A-Fa-f]{4}|u|.)", re.DOTALL)
_CONTROL_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str, source: str = "<string>") -> dict[str, str]:
    """Parse ``text`` as a Java properties file; ``source`` names it in error messages.

    Keys keep their order of first appearance. Raises ``ConfigError`` for a duplicate key (naming
    both line numbers) and for a malformed ``\\uXXXX`` escape.
    """
    result: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for line_number, line in _logical_lines(text):
        raw_key, raw_value = _split_key_value(line)
        key = _unescape(raw_key, source, line_number)
        if key in result:
            raise ConfigError(
                f"duplicate key in {source}: line {first_line[key]} and line {line_number}; "
                "keep one of them (each key may appear only once)",
                key=key,
            )
        result[key] = _unescape(raw_value, source, line_number)
        first_line[key] = line_number
    return result


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Yield (number of the first natural line, logical line) for every non-blank, non-comment line.

    A natural line ending in an odd number of backslashes continues on the next one, whose leading
    whitespace is dropped. Comment lines never continue, and a continuation line is never a comment.
    """
    natural = _LINE_BREAK.split(text)
    index = 0
    while index < len(natural):
        line_number = index + 1
        line = natural[index].lstrip(_WHITESPACE)
        index += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1]
            if index == len(natural):
                break
            line += natural[index].lstrip(_WHITESPACE)
            index += 1
        yield line_number, line


def _continues(line: str) -> bool:
    # An even number of trailing backslashes are escaped backslashes, not a continuation.
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    """Split at the first unescaped ``=``, ``:`` or whitespace; whitespace around it is dropped.

    Whitespace may be followed by one ``=`` or ``:``, which is then the separator (``key = value``).
    """
    escaped = False
    key_end = len(line)
    for position, char in enumerate(line):
        if not escaped and (char in _KEY_SEPARATORS or char in _WHITESPACE):
            key_end = position
            break
        escaped = char == "\\" and not escaped
    rest = line[key_end:].lstrip(_WHITESPACE)
    if rest[:1] and rest[0] in _KEY_SEPARATORS:
        rest = rest[1:].lstrip(_WHITESPACE)
    return line[:key_end], rest


def _unescape(text: str, source: str, line_number: int) -> str:
    def replace(match: re.Match[str]) -> str:
        escape = match.group(1)
        if escape == "u":
            raise ConfigError(
                f"malformed \\uXXXX escape in {source} at line {line_number}; write \\u and four hex "
                "digits, or \\\\u for a backslash followed by u"
            )
        if escape[0] == "u":
            return chr(int(escape[1:], 16))
        # Java drops the backslash of any other escaped character: \= \: \# \\ \  -> the character.
        return _CONTROL_ESCAPES.get(escape, escape)

    unescaped = _ESCAPE.sub(replace, text)
    # \uD83D\uDE00 is one character in Java (UTF-16); join such surrogate pairs, keep lone ones.
    return unescaped.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
