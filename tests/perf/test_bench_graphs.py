"""``trtllm-bench``'s padded decode CUDA graphs (``perf/cudagraph.py`` ``trtllm_bench_graphs``,
``plan/trtllm_bench.py`` ``bench_graphs``): the sizes TensorRT-LLM keeps, the cap it adds, and
the per-rank padding under attention DP, with hand-computed values."""

from __future__ import annotations

from dataclasses import replace

from inferplan.perf.batch import StepBatch
from inferplan.perf.cudagraph import CudaGraphs, decode_graph, trtllm_bench_graphs
from inferplan.plan.published import bundled_published
from inferplan.plan.published_runs import memory_plan, run_setup
from inferplan.plan.trtllm_bench import bench_graphs


def test_sizes_up_to_the_cap_and_the_cap_itself() -> None:
    # max_batch_size 768, max_num_tokens 2,048: 1,024 is above the cap, so 768 is added.
    graphs = trtllm_bench_graphs(768, 2048)
    assert graphs.sizes == (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 768)
    assert graphs.graph_batch(597) == 768  # padded, not eager
    assert graphs.graph_batch(300) == 384
    # A listed size equal to the cap is not added twice; the token budget caps too.
    assert trtllm_bench_graphs(4096, 8192).sizes[-3:] == (1024, 2048, 4096)
    assert trtllm_bench_graphs(1280, 1024).sizes[-2:] == (512, 1024)
    assert trtllm_bench_graphs(8192, 32768).sizes[-1] == 8192  # nothing above the list


def test_decode_pads_each_attention_dp_rank() -> None:
    graphs = trtllm_bench_graphs(1024, 2048)
    batch = StepBatch(num_decode_seqs=3000, decode_context_tokens=3000 * 1536)
    # 4 ranks of 750 sequences each replay the 1,024 graph: 4,096 rows in the GEMMs.
    assert decode_graph(graphs, True, batch, 4) == (4096, False)
    # The generic rule (vLLM/SGLang's graphs) does not pad under DP attention.
    generic = CudaGraphs(graphs.sizes)
    assert decode_graph(generic, True, batch, 4) == (3000, False)
    # One rank: 3,000 rows are above the 1,024 cap, so the step runs eagerly, unpadded.
    assert decode_graph(graphs, True, batch, 1) == (3000, True)
    # A step with a prefill never replays a graph.
    mixed = replace(batch, prefill_tokens=128, num_prefill_seqs=1)
    assert decode_graph(graphs, True, mixed, 4) == (mixed.num_tokens, True)


def test_bench_graphs_only_for_padded_pytorch_rows_without_pp() -> None:
    bench = [
        r
        for r in bundled_published()
        if r.engine == "tensorrt-llm" and r.scenario == "offline" and r.dataset == "fixed"
    ]
    padded = next(r for r in bench if r.settings.get("cuda_graph_padding") == "true" and r.pp == 1)
    setup = run_setup(padded)
    plan = memory_plan(setup)
    graphs = bench_graphs(padded, plan)
    assert graphs is not None and graphs.pads_per_rank
    cap = min(plan.config.max_num_seqs, plan.config.max_num_batched_tokens)
    assert graphs.max_batch == cap
    cpp = next(r for r in bench if "cuda_graph_padding" not in r.settings)  # v0.17 engines
    assert bench_graphs(cpp, memory_plan(run_setup(cpp))) is None
    piped = next(r for r in bench if r.pp > 1)
    assert bench_graphs(piped, memory_plan(run_setup(piped))) is None
