"""Trace readers on the bundled data (values hand-checked against the files) and small files."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest

from inferplan.workload import BUNDLED_TRACES, bundled_trace, load_trace
from inferplan.workload.bundled import DATA_DIR, resolve_trace_path

SHARED_TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"


def test_bundled_names_resolve_to_files() -> None:
    assert set(BUNDLED_TRACES) == {
        "azure_llm_2023_conv",
        "mooncake_fast25_conversation",
        "vidur_splitwise_conv",
        "vidur_arxiv_summarization",
    }
    for name in BUNDLED_TRACES:
        assert bundled_trace(name).is_file()
        assert bundled_trace(bundled_trace(name).name) == bundled_trace(name)


def test_bundled_data_stays_small() -> None:
    total_bytes = sum(path.stat().st_size for path in DATA_DIR.iterdir())
    assert total_bytes < 400_000


def test_azure_2023_bundled() -> None:
    workload = load_trace(bundled_trace("azure_llm_2023_conv"))
    assert workload.num_requests == 2000
    # Rows 1, 2 and 2,000 of the file:
    # 2023-11-16 18:15:46.6805900,374,44 / 18:15:50.9951690,396,109 / 18:22:50.9400470,424,96
    assert workload.arrival_s[0] == 0.0
    assert workload.arrival_s[1] == pytest.approx(4.314579, abs=1e-9)
    assert workload.arrival_s[-1] == pytest.approx(7 * 60 + 4.259457, abs=1e-9)
    assert (workload.input_tokens[0], workload.output_tokens[0]) == (374, 44)
    assert (workload.input_tokens[1], workload.output_tokens[1]) == (396, 109)
    assert (workload.input_tokens[-1], workload.output_tokens[-1]) == (424, 96)
    assert workload.prefix_hashes is None
    assert workload.class_names == ("default",)
    assert np.all(workload.class_ids == 0)
    assert "format azure_2023" in workload.notes


def test_mooncake_bundled_keeps_prefix_hashes() -> None:
    workload = load_trace(bundled_trace("mooncake_fast25_conversation"))
    assert workload.num_requests == 500
    # Line 1: {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0..13]}
    assert (workload.arrival_s[0], workload.input_tokens[0], workload.output_tokens[0]) == (
        0.0,
        6758,
        500,
    )
    assert workload.prefix_hashes is not None
    assert workload.prefix_hashes[0] == tuple(range(14))
    assert workload.prefix_hashes[1][:2] == (0, 14)
    assert workload.prefix_block_tokens == 512
    # Line 500: timestamp 165000 ms, input 15597, output 138.
    assert workload.arrival_s[-1] == 165.0
    assert (workload.input_tokens[-1], workload.output_tokens[-1]) == (15597, 138)
    blocks = np.array([len(h) for h in workload.prefix_hashes])
    assert np.array_equal(blocks, np.ceil(workload.input_tokens / 512))


def test_vidur_bundled_matches_azure_rows() -> None:
    vidur = load_trace(bundled_trace("vidur_splitwise_conv"))
    azure = load_trace(bundled_trace("azure_llm_2023_conv"))
    assert vidur.num_requests == 1000
    assert "format vidur" in vidur.notes
    # Line 1,001: 216.027393,309,18
    assert vidur.arrival_s[-1] == 216.027393
    assert (vidur.input_tokens[-1], vidur.output_tokens[-1]) == (309, 18)
    # Vidur's file is the same Azure trace, row for row.
    assert np.array_equal(vidur.input_tokens, azure.input_tokens[:1000])
    assert np.array_equal(vidur.output_tokens, azure.output_tokens[:1000])
    np.testing.assert_allclose(vidur.arrival_s, azure.arrival_s[:1000], atol=1e-6)


def test_vidur_lengths_only_arrives_at_zero() -> None:
    workload = load_trace(bundled_trace("vidur_arxiv_summarization"))
    assert workload.num_requests == 500
    assert np.all(workload.arrival_s == 0)
    # Lines 2 and 501: 3772,54,3826,... and 2625,240,2865,...
    assert (workload.input_tokens[0], workload.output_tokens[0]) == (3772, 54)
    assert (workload.input_tokens[-1], workload.output_tokens[-1]) == (2625, 240)
    assert "format vidur_lengths" in workload.notes


def test_format_comes_from_content_not_extension(tmp_path: Path) -> None:
    disguised = tmp_path / "azure.jsonl"
    shutil.copy(bundled_trace("azure_llm_2023_conv"), disguised)
    assert "format azure_2023" in load_trace(disguised).notes
    disguised = tmp_path / "mooncake.csv"
    shutil.copy(bundled_trace("mooncake_fast25_conversation"), disguised)
    assert "format mooncake" in load_trace(disguised).notes


def test_gzipped_trace(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv.gz"
    path.write_bytes(gzip.compress(bundled_trace("vidur_splitwise_conv").read_bytes()))
    assert load_trace(path).num_requests == 1000


def test_plain_csv_with_class_and_priority(tmp_path: Path) -> None:
    path = tmp_path / "plain.csv"
    path.write_text(
        "arrival_s,input_tokens,output_tokens,class,priority\n"
        "0.0,10,5,chat,1\n"
        "0.5,20,6,reasoning,0\n"
        "\n"
        "1.5,30,7,chat,-2\n"
    )
    workload = load_trace(path)
    assert workload.class_names == ("chat", "reasoning")
    assert workload.class_ids.tolist() == [0, 1, 0]
    assert workload.priorities is not None
    assert workload.priorities.tolist() == [1, 0, -2]
    assert workload.arrival_s.tolist() == [0.0, 0.5, 1.5]
    assert workload.input_tokens.dtype == np.int64


def test_plain_jsonl_optional_keys(tmp_path: Path) -> None:
    path = tmp_path / "plain.jsonl"
    path.write_text(
        '{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5, "class": "chat"}\n'
        '{"arrival_s": 1.25, "input_tokens": "20", "output_tokens": 6.0}\n'
    )
    workload = load_trace(path)
    assert workload.class_names == ("chat", "default")
    assert workload.input_tokens.tolist() == [10, 20]
    assert workload.output_tokens.tolist() == [5, 6]
    assert workload.priorities is None  # no row gives one


def test_header_names_match_case_insensitively(tmp_path: Path) -> None:
    path = tmp_path / "upper.csv"
    path.write_text("ARRIVAL_S,Input_Tokens,output_tokens,Priority\n0,1,1,\n1,1,1,3\n")
    workload = load_trace(path)
    assert workload.priorities is not None
    assert workload.priorities.tolist() == [0, 3]  # a blank priority is vLLM's default, 0


def test_unsorted_rows_are_sorted_stably(tmp_path: Path) -> None:
    path = tmp_path / "unsorted.csv"
    rows = [(2.0, 1), (1.0, 2), (2.0, 3), (1.0, 4), (0.5, 5)]
    body = "".join(f"{t},{i},1\n" for t, i in rows)
    path.write_text("arrival_s,input_tokens,output_tokens\n" + body)
    workload = load_trace(path)
    assert workload.arrival_s.tolist() == [0.5, 1.0, 1.0, 2.0, 2.0]
    assert workload.input_tokens.tolist() == [5, 2, 4, 1, 3]  # ties keep file order
    assert any("sorted" in note for note in workload.notes)


def test_unsorted_mooncake_moves_hashes_with_rows(tmp_path: Path) -> None:
    path = tmp_path / "mooncake.jsonl"
    path.write_text(
        '{"timestamp": 3000, "input_length": 600, "output_length": 1, "hash_ids": [7, 8]}\n'
        '{"timestamp": 1000, "input_length": 100, "output_length": 2, "hash_ids": [9]}\n'
    )
    workload = load_trace(path)
    assert workload.arrival_s.tolist() == [1.0, 3.0]
    assert workload.prefix_hashes == ((9,), (7, 8))


def test_azure_arrivals_count_from_the_earliest_row(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:00:01.5000000,10,1\n"
        "2023-11-16 18:00:00.2500000,20,2\n"
        "2023-11-16T18:00:03,30,3\n"
    )
    workload = load_trace(path)
    assert workload.arrival_s.tolist() == [0.0, 1.25, 2.75]
    assert workload.input_tokens.tolist() == [20, 10, 30]


def test_explicit_format_name(tmp_path: Path) -> None:
    path = tmp_path / "lengths.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens\n5,6\n")
    assert "format vidur_lengths" in load_trace(path).notes
    assert "format vidur_lengths" in load_trace(path, trace_format="vidur_lengths").notes


def test_resolve_trace_path_prefers_existing_files(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n0,1,1\n")
    assert resolve_trace_path(path) == path
    assert resolve_trace_path("azure_llm_2023_conv") == bundled_trace("azure_llm_2023_conv")


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="../shared/traces is not present")
@pytest.mark.parametrize(
    ("file_name", "num_requests", "input_mean", "output_mean"),
    [
        ("azure_llm_2023_conv.csv", 19366, 1155, 211),
        ("mooncake_fast25_conversation_trace.jsonl", 12031, 12035, 343),
        ("vidur_arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv", 28257, 2588, 291),
    ],
)
def test_full_shared_traces_match_their_readme(
    file_name: str, num_requests: int, input_mean: float, output_mean: float
) -> None:
    workload = load_trace(SHARED_TRACES / file_name)
    assert workload.num_requests == num_requests
    assert workload.input_tokens.mean() == pytest.approx(input_mean, abs=0.6)
    assert workload.output_tokens.mean() == pytest.approx(output_mean, abs=0.6)
