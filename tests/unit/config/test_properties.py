"""java.util.Properties syntax, plus the stricter duplicate-key rule."""

from __future__ import annotations

import pytest

from mirrorflow.config.properties import parse_properties
from mirrorflow.errors import ConfigError


def test_separators_and_whitespace_around_them() -> None:
    text = "a=1\nb = 2\nc:3\nd : 4\ne 5\nf\t \t6\ng  =  = 7\nh==8\n"
    assert parse_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "4",
        "e": "5",
        "f": "6",
        "g": "= 7",
        "h": "=8",
    }


def test_comments_blank_lines_and_leading_whitespace() -> None:
    text = "# comment\n! also a comment\n\n   \n   key = value\n  # indented comment\n"
    assert parse_properties(text) == {"key": "value"}


def test_key_without_value() -> None:
    assert parse_properties("alone\nspaced   \nequals=\n") == {"alone": "", "spaced": "", "equals": ""}


def test_trailing_whitespace_of_a_value_is_kept_like_java() -> None:
    assert parse_properties("k = v  \n") == {"k": "v  "}


def test_flow_keys_keep_the_arrow() -> None:
    assert parse_properties("primary->backup.enabled = true") == {"primary->backup.enabled": "true"}


def test_line_continuation_drops_leading_whitespace_of_the_next_line() -> None:
    text = "topics = orders, \\\n          payments, \\\n   invoices\nnext = 1\n"
    assert parse_properties(text) == {"topics": "orders, payments, invoices", "next": "1"}


def test_even_number_of_trailing_backslashes_is_not_a_continuation() -> None:
    assert parse_properties("path = C:\\\\\nnext = 1\n") == {"path": "C:\\", "next": "1"}


def test_continuation_line_starting_with_hash_is_not_a_comment() -> None:
    assert parse_properties("k = a\\\n  #b\n") == {"k": "a#b"}


def test_comment_line_ending_in_backslash_does_not_continue() -> None:
    assert parse_properties("# note \\\nk = v\n") == {"k": "v"}


def test_continuation_at_end_of_text() -> None:
    assert parse_properties("k = v\\") == {"k": "v"}


def test_java_line_terminators_only() -> None:
    assert parse_properties("a=1\r\nb=2\rc=3\x0bd\n") == {"a": "1", "b": "2", "c": "3\x0bd"}


def test_escapes() -> None:
    text = r"k = tab\tnl\nret\rff\fback\\slash\u00e9\q" + "\n" + r"emoji = \uD83D\uDE00"
    assert parse_properties(text) == {"k": "tab\tnl\nret\rff\fback\\slash\u00e9q", "emoji": "\U0001f600"}


def test_escaped_separators_in_keys() -> None:
    text = r"a\=b = 1" + "\n" + r"c\:d:2" + "\n" + r"e\ f 3" + "\n" + r"\#g = 4"
    assert parse_properties(text) == {"a=b": "1", "c:d": "2", "e f": "3", "#g": "4"}


def test_malformed_unicode_escape() -> None:
    with pytest.raises(ConfigError, match=r"malformed \\uXXXX escape in my\.properties at line 2"):
        parse_properties("ok = 1\nbad = \\u12G4\n", source="my.properties")


def test_duplicate_key_names_key_lines_and_file() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_properties("a = 1\nb = 2\n\na = 3\n", source="/etc/mm2.properties")
    assert caught.value.key == "a"
    assert str(caught.value) == (
        "a: duplicate key in /etc/mm2.properties: line 1 and line 4; "
        "keep one of them (each key may appear only once)"
    )


def test_duplicate_key_after_unescaping_reports_logical_line_starts() -> None:
    with pytest.raises(ConfigError, match="line 1 and line 3") as caught:
        parse_properties("a\\\n  b = 1\na\\u0062 = 2\n")
    assert caught.value.key == "ab"


def test_keys_keep_file_order() -> None:
    assert list(parse_properties("z=1\na=2\nm=3")) == ["z", "a", "m"]
