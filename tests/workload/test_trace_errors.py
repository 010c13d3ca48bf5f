"""Malformed traces give one-line errors that name the file and the 1-based line."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.errors import InferplanError
from inferplan.workload import load_trace

PLAIN = "arrival_s,input_tokens,output_tokens\n"
MOONCAKE_ROW = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'

# (file name, content, line the error must name, words the message must contain)
CASES = [
    ("empty.csv", "", 1, "empty"),
    ("blank.csv", "\n  \n", 1, "empty"),
    ("header_only.csv", PLAIN, 1, "no requests"),
    ("commas.csv", ",,\n,\n", 1, "no CSV header"),
    ("missing.csv", "arrival_s,input_tokens\n0,5\n", 1, "missing column 'output_tokens'"),
    ("azure_missing.csv", "TIMESTAMP,ContextTokens\nx,1\n", 1, "'GeneratedTokens'"),
    ("text.csv", PLAIN + "0,5,6\n1,abc,6\n", 3, "input_tokens is 'abc', not a number"),
    ("zero_out.csv", PLAIN + "0,5,0\n", 2, "output_tokens is 0; token counts must be >= 1"),
    ("neg_in.csv", PLAIN + "0,5,1\n0,-3,1\n", 3, "input_tokens is -3"),
    ("frac.csv", PLAIN + "0,5.5,1\n", 2, "not a whole number"),
    ("empty_cell.csv", PLAIN + "0,,1\n", 2, "input_tokens is ''"),
    ("fields.csv", PLAIN + "0,5,1\n1,5\n", 3, "2 fields, but the header on line 1 has 3"),
    ("neg_time.csv", PLAIN + "-1,5,1\n", 2, "arrival times must be >= 0"),
    ("nan_time.csv", PLAIN + "nan,5,1\n", 2, "not a finite number"),
    ("priority.csv", "arrival_s,input_tokens,output_tokens,priority\n0,1,1,high\n", 2, "priority"),
    ("unknown.csv", "foo,bar\n1,2\n", 1, "unknown trace format"),
    ("crlf.csv", PLAIN.replace("\n", "\r\n") + "0,1,1\r\n\r\n0,1,x\r\n", 4, "output_tokens"),
    (
        "azure_time.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,1,1\n2023-13-45 1:2,1,1\n",
        3,
        "not a datetime like 2023-11-16 18:17:03.9799600",
    ),
    ("array.jsonl", '[{"arrival_s": 0}]\n', 1, "one JSON object per line"),
    ("bad.jsonl", MOONCAKE_ROW + "\n" + '{"timestamp": 1,\n', 3, "not valid JSON"),
    ("list.jsonl", MOONCAKE_ROW + "[1, 2]\n", 2, "expected one JSON object per line"),
    ("keys.jsonl", '{"a": 1, "b": 2}\n', 1, "unknown trace format"),
    (
        "no_out.jsonl",
        MOONCAKE_ROW + '{"timestamp": 5, "input_length": 10, "hash_ids": [3]}\n',
        2,
        "missing key 'output_length'",
    ),
    (
        "hashes.jsonl",
        MOONCAKE_ROW + '{"timestamp": 5, "input_length": 10, "output_length": 1}\n',
        2,
        "lacks 'hash_ids'",
    ),
    (
        "hash_type.jsonl",
        '{"timestamp": 0, "input_length": 6, "output_length": 5, "hash_ids": "1,2"}\n',
        1,
        "not a list of integer block ids",
    ),
    (
        "bool.jsonl",
        '{"arrival_s": 0, "input_tokens": true, "output_tokens": 5}\n',
        1,
        "input_tokens is True",
    ),
]


@pytest.mark.parametrize(("file_name", "content", "line", "words"), CASES)
def test_bad_file_names_file_and_line(
    tmp_path: Path, file_name: str, content: str, line: int, words: str
) -> None:
    path = tmp_path / file_name
    path.write_bytes(content.encode())
    with pytest.raises(InferplanError) as info:
        load_trace(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert words in message
    assert "\n" not in message


def test_unknown_format_lists_the_accepted_ones(tmp_path: Path) -> None:
    path = tmp_path / "unknown.csv"
    path.write_text("foo,bar\n1,2\n")
    with pytest.raises(InferplanError) as info:
        load_trace(path)
    for name in ("azure_2023", "vidur", "vidur_lengths", "csv", "mooncake", "jsonl"):
        assert f"{name} (" in str(info.value)


def test_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes(PLAIN.encode() + b"0,1,1\n0,\xff\xfe,1\n")
    with pytest.raises(InferplanError, match=r":3: not UTF-8 text"):
        load_trace(path)


def test_missing_file_and_folder(tmp_path: Path) -> None:
    with pytest.raises(InferplanError, match="no such trace file"):
        load_trace(tmp_path / "absent.csv")
    with pytest.raises(InferplanError, match="is a folder"):
        load_trace(tmp_path)


def test_damaged_gzip(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv.gz"
    path.write_bytes(b"\x1f\x8b" + b"not really gzip")
    with pytest.raises(InferplanError, match="damaged gzip"):
        load_trace(path)


def test_unknown_or_mismatched_format_name(tmp_path: Path) -> None:
    path = tmp_path / "plain.csv"
    path.write_text(PLAIN + "0,1,1\n")
    with pytest.raises(InferplanError, match="unknown trace format 'parquet'"):
        load_trace(path, trace_format="parquet")
    with pytest.raises(InferplanError, match=r":1: the mooncake format is JSONL"):
        load_trace(path, trace_format="mooncake")


_PIECES = [
    "arrival_s,input_tokens,output_tokens\n",
    "TIMESTAMP,ContextTokens,GeneratedTokens\n",
    '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n',
    '{"arrival_s": 1e400, "input_tokens": 1e30, "output_tokens": -0.0}\n',
    '{"arrival_s": 0, "input_tokens": 5, "output_tokens": 2, "priority": 1e300}\n',
    "0,5,1\n",
    "2023-11-16 18:17:03.9799600,5,1\n",
    '"a,b",1\n',
    "NaN,inf,-inf\n",
    ",,,\n",
    "\r\n",
    '{"x": [}\n',
    "null\n",
    "\x00\n",
]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_PIECES) | st.text(max_size=12), min_size=0, max_size=6))
def test_any_content_gives_a_workload_or_a_one_line_error(pieces: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.txt"
        path.write_text("".join(pieces), encoding="utf-8", errors="surrogatepass")
        try:
            workload = load_trace(path)
        except InferplanError as err:
            assert "\n" not in str(err)
            assert str(err).startswith(str(path))
        else:
            assert workload.num_requests >= 1
            assert workload.input_tokens.min() >= 1
            assert workload.output_tokens.min() >= 1
