"""The measured-table step-time model: interpolation on the profile grid, roofline fallback for
what the profile lacks, the fast-simulator line, and one-line errors for malformed files."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferplan.errors import InferplanError
from inferplan.perf.comm import allreduce_s
from inferplan.perf.op import ACT_BYTES
from inferplan.perf.roofline import RooflineModel
from inferplan.perf.table import OperatorTable, TableModel, load_operator_table
from inferplan.specs.model import ModelSpec
from perf.perf_helpers import assert_line_matches, decode, roofline

# attn_decode on a (batch size) x (context per sequence) grid; mlp by tokens.
GRID_CSV = """operator,num_tokens,context_tokens,time_s
attn_decode,1,0,1e-6
attn_decode,1,1024,2e-6
attn_decode,1,4096,5e-6
attn_decode,8,0,4e-6
attn_decode,8,1024,8e-6
attn_decode,8,4096,20e-6
mlp,1,0,1e-4
mlp,64,0,1.5e-4
"""
LLAMA_LAYERS = 32


def write(tmp_path: Path, text: str, name: str = "profile.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture
def table(tmp_path: Path) -> OperatorTable:
    return load_operator_table(write(tmp_path, GRID_CSV))


def test_grid_points_return_the_measurement(table: OperatorTable) -> None:
    for line in GRID_CSV.splitlines()[1:]:
        op, tokens, context, time_s = line.split(",")
        assert table.time(op, int(tokens), float(context)) == pytest.approx(float(time_s))


def test_between_grid_points_is_linear_in_each_axis(table: OperatorTable) -> None:
    # Context 2048 is 1/3 of the way from 1024 to 4096: 3e-6 at batch 1, 12e-6 at batch 8.
    assert table.time("attn_decode", 1, 2048) == pytest.approx(3e-6)
    assert table.time("attn_decode", 8, 2048) == pytest.approx(12e-6)
    # Batch 4 is 3/7 of the way from 1 to 8.
    assert table.time("attn_decode", 4, 2048) == pytest.approx(3e-6 + 9e-6 * 3 / 7)
    assert table.time("mlp", 32) == pytest.approx(1e-4 + 0.5e-4 * 31 / 63)


def test_beyond_the_grid_extrapolates_from_the_last_segment(table: OperatorTable) -> None:
    assert table.time("attn_decode", 1, 8192) == pytest.approx(5e-6 + 3e-6 * 4096 / 3072)
    assert table.time("mlp", 127) == pytest.approx(1.5e-4 + 0.5e-4)
    assert table.time("attn_decode", 16, 1024) == pytest.approx(8e-6 + 6e-6 * 8 / 7)


def test_extrapolation_never_goes_below_zero(tmp_path: Path) -> None:
    falling = "operator,num_tokens,context_tokens,time_s\nmlp,1,0,2e-4\nmlp,2,0,1e-4\n"
    assert load_operator_table(write(tmp_path, falling)).time("mlp", 10) == 0.0


def test_step_uses_the_table_and_falls_back_to_the_roofline(table: OperatorTable) -> None:
    base = roofline("Llama-3.1-8B")
    model = TableModel(base, table)
    batch = decode(8, 1024)
    step, reference = model.step_time(batch), base.step_time(batch)
    assert step.by_operator_s["attn_decode"] == pytest.approx(8e-6 * LLAMA_LAYERS)
    assert step.by_operator_s["mlp"] == pytest.approx(table.time("mlp", 8) * LLAMA_LAYERS)
    for op in ("attn_proj", "elementwise", "lm_head"):  # not in the profile
        assert step.by_operator_s[op] == reference.by_operator_s[op]
    replaced = sum(reference.by_operator_s[op] for op in ("attn_decode", "mlp"))
    measured = step.by_operator_s["attn_decode"] + step.by_operator_s["mlp"]
    assert step.total_s == pytest.approx(reference.total_s - replaced + measured)
    assert sum(step.by_bound_s.values()) == pytest.approx(step.total_s)
    assert step.by_bound_s["communication"] == reference.by_bound_s["communication"]
    assert step.by_bound_s["overhead"] == reference.by_bound_s["overhead"]


@pytest.mark.parametrize("num_seqs", [1, 4, 8])
def test_table_decode_line_matches_its_steps(table: OperatorTable, num_seqs: int) -> None:
    model = TableModel(roofline("Llama-3.1-8B"), table)
    for per_seq in (100, 1024, 3000, 4096, 10_000):
        limit = assert_line_matches(model, num_seqs, num_seqs * per_seq)
        if per_seq < 4096:
            assert limit <= num_seqs * 4096  # a grid point ends the stretch


# ---- a profile of the roofline itself must give the roofline back ----------------------------

LAYER_OPS = ("attn_proj", "mlp", "router", "shared_experts", "experts", "elementwise")


def _layers_running(spec: ModelSpec, op: str) -> int:
    if op == "mlp":
        return sum(layer.ffn.kind == "dense" for layer in spec.layers)
    if op in ("router", "shared_experts", "experts"):
        return sum(layer.ffn.kind == "moe" for layer in spec.layers)
    return spec.num_layers


def self_profile(model: RooflineModel, num_seqs: int, context_per_seq: int) -> str:
    """CSV rows of the per-layer times the single-device roofline gives for this decode shape:
    what a profiler would measure if the hardware behaved exactly like the model."""
    step = model.step_time(decode(num_seqs, context_per_seq))
    rows = ["operator,num_tokens,context_tokens,time_s"]
    for op in LAYER_OPS:
        if op in step.by_operator_s:
            per_layer = step.by_operator_s[op] / _layers_running(model.spec, op)
            rows.append(f"{op},{num_seqs},0,{per_layer!r}")
    per_layer = step.by_operator_s["attn_decode"] / model.spec.num_layers
    rows.append(f"attn_decode,{num_seqs},{context_per_seq},{per_layer!r}")
    rows.append(f"lm_head,{num_seqs},0,{step.by_operator_s['lm_head']!r}")
    return "\n".join(rows) + "\n"


def test_a_profile_of_the_roofline_gives_the_roofline_back(tmp_path: Path) -> None:
    model = roofline("Llama-3.1-8B")
    table = load_operator_table(write(tmp_path, self_profile(model, 16, 2000)))
    expected = model.step_time(decode(16, 2000)).total_s
    assert TableModel(model, table).step_time(decode(16, 2000)).total_s == pytest.approx(expected)


@pytest.mark.parametrize(
    ("name", "pp"), [("Llama-3.1-8B", 2), ("DeepSeek-V3", 1)], ids=["pipeline", "mixed-layers"]
)
def test_a_profile_of_the_roofline_gives_the_roofline_back_for_any_stack(
    tmp_path: Path, name: str, pp: int
) -> None:
    """Per-layer times do not depend on how the stack is split, so a profile taken on one device
    must reproduce each layer operator's time in the roofline it came from, for pipelined and
    mixed-layer stacks too."""
    gpu, batch = "h200", decode(1, 2000)
    table = load_operator_table(write(tmp_path, self_profile(roofline(name, gpu), 1, 2000)))
    split = roofline(name, gpu, pp=pp)
    measured = TableModel(split, table).step_time(batch).by_operator_s
    modelled = split.step_time(batch).by_operator_s
    for op in (*LAYER_OPS, "attn_decode"):  # per-layer operators only: the head is another bug
        if op in modelled:
            assert measured[op] == pytest.approx(modelled[op]), op


# ---- malformed files --------------------------------------------------------------------------

HEADER = "operator,num_tokens,context_tokens,time_s\n"


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ("operator,num_tokens,time_s\nmlp,1,1e-4\n", ":1:", "missing column(s) context_tokens"),
        (HEADER + "mlp,1,0,1e-4\nattention,1,0,1e-4\n", ":3:", "unknown operator 'attention'"),
        (HEADER + "mlp,one,0,1e-4\n", ":2:", "must be numbers"),
        (HEADER + "mlp,1,0,fast\n", ":2:", "must be numbers"),
        (HEADER + "mlp,1,0,1e-4\nmlp,2,0,-1e-4\n", ":3:", "time_s is -0.0001"),
        (HEADER + "mlp,0,0,1e-4\n", ":2:", "1 <= num_tokens"),
        (HEADER + "attn_decode,1,-5,1e-4\n", ":2:", "0 <= context_tokens"),
        (HEADER + "mlp,1,0,nan\n", ":2:", "time_s is nan"),
        # Issue 9: numbers beyond range and duplicate columns are refused with file:line.
        (HEADER + "mlp,1,0,inf\n", ":2:", "MAX_OPERATOR_TIME_S"),
        (HEADER + "mlp,1" + "0" * 5000 + ",0,1e-4\n", ":2:", "must be numbers"),
        (HEADER + "mlp,1,1e400,1e-4\n", ":2:", "MAX_TOKENS"),
        ("operator,num_tokens,context_tokens,time_s,time_s\nmlp,1,0,1,2\n", ":1:", "twice"),
        (HEADER + "mlp,1,0\n", ":2:", "3 fields"),
        (HEADER, "", "no rows"),
    ],
)
def test_malformed_profiles_name_the_file_and_line(
    tmp_path: Path, text: str, where: str, what: str
) -> None:
    path = write(tmp_path, text, "bad.csv")
    with pytest.raises(InferplanError) as err:
        load_operator_table(path)
    message = str(err.value)
    assert message.startswith(f"{path}{where}")
    assert what in message
    assert "\n" not in message


def test_a_missing_profile_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InferplanError, match="no such --operator-table file"):
        load_operator_table(tmp_path / "absent.csv")


# ---- comments and the measured all-reduce -----------------------------------------------------


def test_comment_lines_are_skipped_and_errors_keep_file_line_numbers(tmp_path: Path) -> None:
    text = "# inferplan profile: provenance\n# note: x\n" + HEADER + "mlp,1,0,1e-4\n# mid\n"
    assert load_operator_table(write(tmp_path, text)).time("mlp", 1) == pytest.approx(1e-4)
    bad = write(tmp_path, text + "mlp,2,0,slow\n", "bad.csv")
    with pytest.raises(InferplanError, match=r"bad\.csv:6: "):
        load_operator_table(bad)
    only_comments = write(tmp_path, "# nothing\noperator,tokens\n", "cols.csv")
    with pytest.raises(InferplanError, match=r"cols\.csv:2: missing column"):
        load_operator_table(only_comments)


ALLREDUCE_CSV = HEADER + "allreduce,1,0,1e-5\nallreduce,1024,0,3e-5\n"
MEASURED_AT_1024 = 3e-5


def modelled_allreduce_s(model: RooflineModel, tokens: int) -> float:
    message = tokens * model.spec.hidden_size * ACT_BYTES
    return allreduce_s(message, model.par.tp, model.gpu, model.eff)


@pytest.mark.parametrize("name", ["Llama-3.1-70B", "Qwen3-30B-A3B"])
def test_a_measured_allreduce_replaces_the_modelled_one(tmp_path: Path, name: str) -> None:
    """Both all-reduces of each layer (after attention, after the dense or TP-sharded FFN) take
    the measured time; kernels and overheads stay as they were."""
    base = roofline(name, "h100", tp=4)
    model = TableModel(base, load_operator_table(write(tmp_path, ALLREDUCE_CSV)))
    batch = decode(1024, 1000)
    step, reference = model.step_time(batch), base.step_time(batch)
    layers = base.spec.num_layers
    assert reference.by_bound_s["communication"] == pytest.approx(
        2 * layers * modelled_allreduce_s(base, 1024)
    )
    assert step.by_bound_s["communication"] == pytest.approx(2 * layers * MEASURED_AT_1024)
    for bound in ("compute", "memory", "overhead"):
        assert step.by_bound_s[bound] == reference.by_bound_s[bound]
    assert step.total_s == pytest.approx(sum(step.by_bound_s.values()))


def test_expert_parallel_all_to_all_stays_modelled(tmp_path: Path) -> None:
    """With EP a MoE layer all-to-alls instead of its FFN all-reduce: only the attention
    all-reduce is replaced."""
    base = roofline("Qwen3-30B-A3B", "h100", tp=4, ep=True)
    model = TableModel(base, load_operator_table(write(tmp_path, ALLREDUCE_CSV)))
    step, reference = model.step_time(decode(1024, 1000)), base.step_time(decode(1024, 1000))
    delta = MEASURED_AT_1024 - modelled_allreduce_s(base, 1024)
    expected = reference.by_bound_s["communication"] + base.spec.num_layers * delta
    assert step.by_bound_s["communication"] == pytest.approx(expected)


def test_a_single_device_ignores_allreduce_rows(tmp_path: Path) -> None:
    base = roofline("Llama-3.1-8B")
    model = TableModel(base, load_operator_table(write(tmp_path, ALLREDUCE_CSV)))
    assert model.step_time(decode(8, 1000)) == base.step_time(decode(8, 1000))


def test_data_parallel_attention_looks_up_each_rank_s_share(tmp_path: Path) -> None:
    """With DP attention (EP over 4 ranks) a rank runs attention, projections, router and LM
    head on a quarter of the batch and the routed experts on every rank's tokens: a profile at
    those shapes must give the DP roofline's operator times back."""
    split = roofline("Qwen3-30B-A3B", "h200", dp=4, ep=True)
    rows = ["operator,num_tokens,context_tokens,time_s"]
    for n in (64, 128):  # two grid points, so a lookup at the wrong shape is off the line
        modelled = split.step_time(decode(n, 2000)).by_operator_s
        for op in LAYER_OPS:
            if op in modelled:
                per_layer = modelled[op] / _layers_running(split.spec, op)
                rows.append(f"{op},{n if op == 'experts' else n // 4},0,{per_layer!r}")
        per_layer = modelled["attn_decode"] / split.spec.num_layers
        rows.append(f"attn_decode,{n // 4},2000,{per_layer!r}")
        rows.append(f"lm_head,{n // 4},0,{modelled['lm_head']!r}")
    table = load_operator_table(write(tmp_path, "\n".join(rows) + "\n"))
    batch = decode(96, 2000)
    measured = TableModel(split, table).step_time(batch).by_operator_s
    modelled = split.step_time(batch).by_operator_s
    for op in ("attn_proj", "router", "experts", "elementwise", "lm_head"):
        assert measured[op] == pytest.approx(modelled[op], rel=0.02), op
    # Attention over the context is exact at the grid's context.
    assert measured["attn_decode"] == pytest.approx(modelled["attn_decode"], rel=0.02)


def test_a_uniform_profile_of_the_experts_carries_routing_skew(tmp_path: Path) -> None:
    """A profiler measures the routed experts under uniform routing; with skew the busiest EP
    rank does the work of a uniform step with ``ep x max share`` times the tokens, so the table
    is looked up there. In the compute-bound regime (every expert touched) that gives the
    skewed roofline's time back."""
    uniform = roofline("Qwen3-30B-A3B", "h200", dp=4, ep=True)
    skewed = roofline("Qwen3-30B-A3B", "h200", dp=4, ep=True, zipf=0.6)
    rows = ["operator,num_tokens,context_tokens,time_s"]
    layers = _layers_running(uniform.spec, "experts")
    for n in (4096, 8192, 16384, 32768):
        per_layer = uniform.step_time(decode(n, 100)).by_operator_s["experts"] / layers
        rows.append(f"experts,{n},0,{per_layer!r}")
    table = load_operator_table(write(tmp_path, "\n".join(rows) + "\n"))
    batch = decode(8192, 100)
    measured = TableModel(skewed, table).step_time(batch).by_operator_s["experts"]
    assert measured == pytest.approx(skewed.step_time(batch).by_operator_s["experts"], rel=0.02)
    assert measured > 1.3 * uniform.step_time(batch).by_operator_s["experts"]
