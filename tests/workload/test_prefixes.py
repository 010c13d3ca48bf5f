"""Shared-prefix and session hashes (``workload/prefixes.py``) and their regrouping into KV
blocks (``memory/prefixcache.regroup_hashes``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from inferplan.cli import main
from inferplan.errors import InferplanError
from inferplan.memory.prefixcache import regroup_hashes
from inferplan.workload import build_workload, load_trace
from inferplan.workload.prefixes import (
    HASH_BLOCK_TOKENS,
    prefix_groups,
    session_hashes,
    with_shared_prefix,
)


def test_prefix_adds_to_the_drawn_input_length_as_vllm_does() -> None:
    base = build_workload("random", num_prompts=50, random_input_len=200, random_range_ratio=0.5)
    wl = with_shared_prefix(base, 100)
    np.testing.assert_array_equal(wl.input_tokens, base.input_tokens + 100)
    np.testing.assert_array_equal(wl.output_tokens, base.output_tokens)
    np.testing.assert_array_equal(wl.arrival_s, base.arrival_s)
    assert wl.prefix_block_tokens == HASH_BLOCK_TOKENS
    assert wl.prefix_hashes is not None
    # 100 tokens: 6 full shared blocks; the 7th straddles the prefix's end and is unique.
    for i, h in enumerate(wl.prefix_hashes):
        assert h[:6] == (0, 1, 2, 3, 4, 5)
        assert len(h) == int(wl.input_tokens[i]) // HASH_BLOCK_TOKENS
    later = [x for h in wl.prefix_hashes for x in h[6:]]
    assert len(later) == len(set(later)) and min(later) >= 6  # unique to each request


def test_prefix_groups_are_uniform_seeded_and_leave_lengths_alone() -> None:
    groups = prefix_groups(20_000, 4, seed=7)
    counts = np.bincount(groups, minlength=4)
    assert counts.sum() == 20_000 and np.all(np.abs(counts - 5000) < 300)  # ~4 sigma
    np.testing.assert_array_equal(groups, prefix_groups(20_000, 4, seed=7))
    assert not np.array_equal(groups, prefix_groups(20_000, 4, seed=8))
    base = build_workload("random", num_prompts=40, random_input_len=64, seed=7)
    wl = with_shared_prefix(base, 32, num_groups=4, seed=7)
    assert wl.prefix_hashes is not None
    g = prefix_groups(40, 4, seed=7)
    for i, h in enumerate(wl.prefix_hashes):
        assert h[:2] == (2 * g[i], 2 * g[i] + 1)  # its group's two shared blocks


def test_no_prefix_is_the_same_workload_and_bad_values_are_refused() -> None:
    base = build_workload("random", num_prompts=5)
    assert with_shared_prefix(base, 0) is base
    with pytest.raises(InferplanError, match="--prefix-groups"):
        with_shared_prefix(base, 0, num_groups=3)
    hashed = with_shared_prefix(base, 64)
    with pytest.raises(InferplanError, match="already carries prefix hashes"):
        with_shared_prefix(hashed, 64)
    huge = build_workload("random", num_prompts=1000, random_input_len=200_000)
    with pytest.raises(InferplanError, match="MAX_HASHED_BLOCKS"):
        with_shared_prefix(huge, 16)


def test_session_turns_share_the_previous_prompt_and_output() -> None:
    # Session a: turn 1 prompt 40 + output 30 = 70 tokens of context, turn 2 prompt 100.
    inputs = np.array([40, 50, 100, 60], dtype=np.int64)
    outputs = np.array([30, 5, 20, 1], dtype=np.int64)
    h = session_hashes(["a", None, "a", "a"], inputs, outputs)
    # Each request's hashes cover its prompt + output: 70 // 16 = 4, 55 // 16 = 3, 120 // 16 = 7.
    assert [len(x) for x in h[:3]] == [4, 3, 7]
    # Turn 2 keeps the 4 full blocks of turn 1's 70-token context (2 prompt + 2 output blocks).
    assert h[2][:4] == h[0]
    assert len(set(h[2][4:]) & set(h[0] + h[1])) == 0
    # Turn 3's prompt (60) is shorter than the 120-token context: history was cut, no sharing.
    assert not set(h[3]) & set(h[2])
    assert not set(h[1]) & (set(h[0]) | set(h[2]))  # no session: its own blocks


def test_regroup_hashes_into_whole_kv_blocks() -> None:
    hashes = ((1, 2, 3, 4, 5), (1, 2, 7))
    assert regroup_hashes(hashes, 16, 16) == (hashes, 16)
    assert regroup_hashes(hashes, 16, 8) == (hashes, 16)  # two KV blocks per entry
    assert regroup_hashes(hashes, 16, 32) == (((2, 4), (2,)), 32)  # last id of each pair
    assert regroup_hashes(hashes, 16, 48) == (((3,), (7,)), 48)
    assert regroup_hashes(hashes, 512, 48) == (((3,), (7,)), 1536)


def test_session_id_column_gives_turns_shared_prefixes(tmp_path: Path) -> None:
    csv_path = tmp_path / "chat.csv"
    csv_path.write_text(
        "arrival_s,input_tokens,output_tokens,session_id\n"
        "0.0,40,30,a\n"
        "0.5,50,5,\n"
        "2.0,100,20,a\n"
        "1.0,64,8,b\n"
    )
    wl = load_trace(csv_path)
    assert wl.prefix_block_tokens == HASH_BLOCK_TOKENS and wl.prefix_hashes is not None
    # Sorted by arrival: a(40), (50), b(64), a(100); a's second turn keeps its first turn's ids.
    h = wl.prefix_hashes
    assert wl.input_tokens.tolist() == [40, 50, 64, 100]
    assert h[3][:4] == h[0] and len(h[3]) == 7
    assert not set(h[2]) & set(h[3])
    jsonl = tmp_path / "chat.jsonl"
    rows = [
        '{"arrival_s": 0, "input_tokens": 40, "output_tokens": 30, "session_id": 7}',
        '{"arrival_s": 2, "input_tokens": 100, "output_tokens": 20, "session_id": 7}',
    ]
    jsonl.write_text("\n".join(rows) + "\n")
    j = load_trace(jsonl).prefix_hashes
    assert j is not None and j[1][:4] == j[0]


def test_traces_without_session_ids_carry_no_hashes(tmp_path: Path) -> None:
    path = tmp_path / "plain.csv"
    path.write_text("arrival_s,input_tokens,output_tokens,session_id\n0,10,5,\n1,20,5,\n")
    assert load_trace(path).prefix_hashes is None


def test_session_turns_hit_the_cache_in_a_simulation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Turn 2 of a conversation, one at a time: its hit is turn 1's prompt + output blocks
    (vLLM v1 caches generated blocks too)."""
    path = tmp_path / "chat.csv"
    path.write_text("arrival_s,input_tokens,output_tokens,session_id\n0,100,40,a\n30,200,10,a\n")
    code = main(
        [
            *("simulate", "--model", "Llama-3.1-8B", "--gpu", "h100"),
            *("--dataset-name", "trace", "--dataset-path", str(path), "--json"),
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    # Turn 1 ends with 100 + 40 - 1 = 139 tokens of KV (the last sampled token is never
    # computed): 8 full 16-token blocks, 6 of its prompt and 2 of its output; turn 2's
    # 200-token prompt starts with those 140 tokens, so it hits 8 blocks = 128 tokens.
    assert data["cached_tokens"] == 128


@pytest.mark.parametrize(
    ("output", "cached"),
    [
        # 100 + 28 = 128 tokens, but the last sampled token's KV is never computed: 127 tokens
        # of KV hold 7 full blocks (112 tokens), so the 8th block is not cached.
        (28, 112),
        (29, 128),  # 128 tokens of KV: 8 full blocks
        (1, 96),  # no full output block: the 6 full prompt blocks
    ],
)
def test_session_turn_hits_full_blocks_of_the_previous_turns_computed_kv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: int, cached: int
) -> None:
    path = tmp_path / "chat.csv"
    path.write_text(
        f"arrival_s,input_tokens,output_tokens,session_id\n0,100,{output},a\n30,300,10,a\n"
    )
    code = main(
        [
            *("simulate", "--model", "Llama-3.1-8B", "--gpu", "h100"),
            *("--dataset-name", "trace", "--dataset-path", str(path), "--json"),
        ]
    )
    assert code == 0
    assert json.loads(capsys.readouterr().out)["cached_tokens"] == cached
