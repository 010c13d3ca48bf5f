"""Load-test CSV tables as calibration input: parsing, one code path with the JSON results, and
one-line errors that name the file, the line and the column."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from inferplan.cli import main
from inferplan.errors import InferplanError
from inferplan.memory.plan import MemoryConfig
from inferplan.plan.benchcsv import read_bench_csv
from inferplan.plan.benchrecord import BenchSettings
from inferplan.plan.benchresult import bench_runs, read_bench_records
from inferplan.plan.validation import Deployment

HEADER = "request_rate,input_len,output_len,num_prompts,mean_ttft_ms"


def _write(tmp_path: Path, text: str, name: str = "load.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_rows_become_records_named_by_file_and_line(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        " Request_Rate ,INPUT_LEN,output_len,num_prompts,max_concurrency,burstiness,"
        "mean_ttft_ms,mean_tpot_ms,output_throughput\n"
        "inf,256,64,30,1,,12.5,7.25,\n"
        "\n"
        " 2.5 , 511.6 ,64,200,,0.5,,,1500\n"
        ",,,,,,,,\n",
    )
    first, second = read_bench_csv(path)
    assert first.run_id == f"{path}:2"
    assert first.settings == BenchSettings(
        num_requests=30,
        input_tokens=256,
        output_tokens=64,
        request_rate=math.inf,
        burstiness=1.0,
        max_concurrency=1,
    )
    assert first.measured == pytest.approx({"ttft_mean_s": 0.0125, "tpot_mean_s": 0.00725})
    assert second.run_id == f"{path}:4"  # the blank line keeps its number; the empty row is skipped
    assert second.settings == BenchSettings(
        num_requests=200,
        input_tokens=512,  # a mean length, rounded
        output_tokens=64,
        request_rate=2.5,
        burstiness=0.5,
        max_concurrency=None,
    )
    assert second.measured == {"output_throughput_tok_s": 1500.0}


def test_a_spreadsheet_export_with_a_byte_order_mark_reads(tmp_path: Path) -> None:
    path = tmp_path / "excel.CSV"
    path.write_bytes(b"\xef\xbb\xbf" + f"{HEADER}\r\n4,128,32,50,9.5\r\n".encode())
    (record,) = read_bench_records(path)  # the suffix is matched in any case
    assert record.run_id == f"{path}:2" and record.settings.request_rate == 4.0


def test_a_csv_row_and_the_same_json_result_make_the_same_runs(tmp_path: Path) -> None:
    """One code path after parsing: equal settings, measurements and workloads."""
    result = {
        "completed": 40,
        "total_input_tokens": 40 * 300,
        "total_output_tokens": 40 * 50,
        "request_rate": 8.0,
        "burstiness": 2.0,
        "max_concurrency": 16,
        "mean_ttft_ms": 35.0,
        "mean_tpot_ms": 9.0,
        "output_throughput": 0,  # vllm bench's 0: not measured
    }
    json_path = _write(tmp_path, json.dumps(result), "run.json")
    csv_path = _write(
        tmp_path,
        "request_rate,burstiness,max_concurrency,num_prompts,input_len,output_len,"
        "mean_ttft_ms,mean_tpot_ms,output_throughput\n8,2,16,40,300,50,35,9,\n",
    )
    deployment = Deployment("Llama-3.1-8B", "h100", 1, 1, None, "auto", MemoryConfig())
    from_json = bench_runs(json_path, deployment)
    from_csv = bench_runs(csv_path, deployment)
    assert [run.case_id for run in from_csv] == [f"{csv_path}:2"] * 2
    assert len(from_json) == len(from_csv) == 2
    for json_run, csv_run in zip(from_json, from_csv, strict=True):
        assert (json_run.metric, json_run.measured, json_run.max_concurrency) == (
            csv_run.metric,
            csv_run.measured,
            csv_run.max_concurrency,
        )
        json_workload, csv_workload = json_run.workload(), csv_run.workload()
        assert np.array_equal(json_workload.arrival_s, csv_workload.arrival_s)
        assert np.array_equal(json_workload.input_tokens, csv_workload.input_tokens)


def test_the_example_in_the_docs_reads(tmp_path: Path) -> None:
    docs = Path(__file__).parents[2] / "docs" / "validation.md"
    example = docs.read_text().split("For example, `loadtest.csv`:\n\n```\n")[1].split("```")[0]
    records = read_bench_csv(_write(tmp_path, example))
    assert [record.run_id.rsplit(":", 1)[1] for record in records] == ["2", "3", "4"]
    assert "output_throughput_tok_s" not in records[0].measured


BAD_TABLES = [
    # (file text, line of the error, words the message must hold)
    ("", 1, "the file is empty"),
    ("\n\n", 1, "the file is empty"),
    (f"\n{HEADER}\n", 2, "no rows after the header"),
    ("request_rate,input_len,output_len,mean_ttft_ms\ninf,1,1,1\n", 1, "'num_prompts'"),
    (f"{HEADER},mean_tpot\n", 1, "unknown column 'mean_tpot' (did you mean 'mean_tpot_ms'?)"),
    (f"{HEADER},input_len\n", 1, "column 'input_len' appears twice"),
    (f"{HEADER},\n", 1, "column 6 of the header has no name"),
    ("request_rate,input_len,output_len,num_prompts\ninf,1,1,1\n", 1, "no measurement column"),
    (f"{HEADER}\ninf,256,64,30,1\ninf,256,64,many,1\n", 3, "num_prompts is 'many'"),
    (f"{HEADER}\ninf,256,64,30.5,1\n", 2, "num_prompts is '30.5'; expected a whole number"),
    (f"{HEADER}\ninf,256,64,0,1\n", 2, "num_prompts is '0'"),
    (f"{HEADER}\n0,256,64,30,1\n", 2, "request_rate is '0'; expected requests per second"),
    (f"{HEADER}\n-inf,256,64,30,1\n", 2, "request_rate is '-inf'"),
    (f"{HEADER}\nnan,256,64,30,1\n", 2, "request_rate is 'nan'"),
    (f"{HEADER}\ninf,,64,30,1\n", 2, "input_len is empty"),
    (f"{HEADER}\ninf,nan,64,30,1\n", 2, "input_len is 'nan'; expected tokens per request"),
    (f"{HEADER}\ninf,256,0.5,30,1\n", 2, "output_len is '0.5'"),
    (f"{HEADER}\ninf,256,64,30,-3\n", 2, "mean_ttft_ms is '-3'; expected a number > 0"),
    (f"{HEADER}\ninf,256,64,30,0\n", 2, "mean_ttft_ms is '0'"),
    (f"{HEADER}\ninf,256,64,30,inf\n", 2, "mean_ttft_ms is 'inf'"),
    (f"{HEADER},max_concurrency\ninf,256,64,30,1,0\n", 2, "max_concurrency is '0'"),
    (f"{HEADER},burstiness\ninf,256,64,30,1,0\n", 2, "burstiness is '0'"),
    (f"{HEADER}\ninf,256,64,30,\n", 2, "no measurement (mean_ttft_ms empty)"),
    (f"{HEADER}\ninf,256,64,30\n", 2, "4 fields, but the header on line 1 has 5 (no cell for"),
    (f"{HEADER}\ninf,256,64,30,1,2\n", 2, "1 cells after mean_ttft_ms"),
    (f"{HEADER}\ninf,256,64,30,{'9' * 200_000}\n", 2, "not valid CSV"),
]


@pytest.mark.parametrize(("text", "line", "words"), BAD_TABLES)
def test_a_bad_table_is_one_line_naming_file_line_and_column(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(InferplanError) as info:
        read_bench_csv(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: ") and words in message and "\n" not in message


def test_unreadable_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(InferplanError, match=r"missing\.csv: no such result file$"):
        read_bench_csv(tmp_path / "missing.csv")
    with pytest.raises(InferplanError, match="is a folder, not a result file"):
        read_bench_csv(tmp_path)
    latin1 = tmp_path / "latin1.csv"
    latin1.write_bytes(f"{HEADER}\ninf,256,64,30,1\n".encode() + b"caf\xe9\n")
    with pytest.raises(InferplanError, match=rf"{latin1}:3: not UTF-8 text"):
        read_bench_csv(latin1)


def test_an_unknown_column_lists_the_valid_ones(tmp_path: Path) -> None:
    path = _write(tmp_path, f"{HEADER},gpu\n")
    with pytest.raises(InferplanError) as info:
        read_bench_csv(path)
    message = str(info.value)
    assert "'gpu'" in message and "did you mean" not in message
    assert message.endswith(
        "valid: request_rate, input_len, output_len, num_prompts, max_concurrency, burstiness, "
        "output_throughput, mean_ttft_ms, mean_tpot_ms"
    )


def test_calibrate_with_a_bad_table_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A JSON result and a CSV table in one call: the table's bad cell is the error."""
    good = {
        "completed": 10,
        "total_input_tokens": 2560,
        "total_output_tokens": 640,
        "mean_ttft_ms": 20.0,
    }
    json_path = _write(tmp_path, json.dumps(good), "run.json")
    csv_path = _write(tmp_path, f"{HEADER}\ninf,256,64,30,1\ninf,256,64,30,fast\n")
    argv = ["calibrate", "--model", "Llama-3.1-8B", "--gpu", "h100", str(json_path), str(csv_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {csv_path}:3: mean_ttft_ms is 'fast'; "
        "expected a number > 0, or empty if not measured\n"
    )
