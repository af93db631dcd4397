"""Every crash category's advice, for both engines, moves the knob that cures its cause and never
the opposite one; a crash no rule decides moves none. Checked on :attr:`Classification.moves`
(the machine-readable form of the advice) from a log line each engine really prints."""

from __future__ import annotations

import pytest

from autotune import crashes
from autotune.crashes import CRASH_CATEGORIES, UNKNOWN_CRASH
from autotune.engines import EngineSpec, create_engine

from .crashbench import wrong_way

pytestmark = pytest.mark.timeout(60)

RULES = {kind: create_engine(EngineSpec(kind=kind)).crash_rules() for kind in ("sglang", "vllm")}
FRACTION = {"sglang": "mem_fraction_static", "vllm": "gpu_memory_utilization"}
MEMORY = {"mem_fraction_static", "gpu_memory_utilization", "cuda_graph_max_bs"}

#: (engine, log text, category, a move the advice must make or None, the label's fix)
CASES = [
    # a KV pool that does not fit the budget: more static memory
    (
        "sglang",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n",
        "oom_kv_pool",
        ("mem_fraction_static", "raise"),
        "raise mem_fraction_static",
    ),
    (
        "vllm",
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.\n",
        "oom_kv_pool",
        ("gpu_memory_utilization", "raise"),
        "raise gpu_memory_utilization",
    ),
    # an out-of-memory while capturing CUDA graphs: a smaller graph batch, never more static memory
    (
        "sglang",
        "Capture cuda graph begin. This can take up to several minutes. avail mem=2.1 GB\n"
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB.\n",
        "oom_cuda_graph",
        ("cuda_graph_max_bs", "lower"),
        "lower cuda_graph_max_bs",
    ),
    (
        "vllm",
        "INFO 06-05 06:18:10 [gpu_model_runner.py:1] Capturing CUDA graphs (decode, FULL)\n"
        "RuntimeError: CUDA error: out of memory\n",
        "oom_cuda_graph",
        None,
        "lower cuda_graph_max_bs",
    ),
    # running out while serving: less load
    (
        "sglang",
        "RuntimeError: Decode out of memory. Try to lower your batch size.\n",
        "oom_runtime",
        ("max_running_requests", "lower"),
        "lower max_running_requests",
    ),
    (
        "vllm",
        "ValueError: Free memory on device (67.24/79.25 GiB) on startup is less than desired GPU "
        "memory utilization (0.9, 71.33 GiB).\n",
        "oom_runtime",
        ("gpu_memory_utilization", "lower"),
        "lower gpu_memory_utilization",
    ),
    # a kernel that does not support the GPU (or the model's shapes): another backend, not memory
    (
        "sglang",
        "RuntimeError: BatchPrefillWithPagedKVCache failed with error code no kernel image is "
        "available for execution on the device\n",
        "unsupported_arch",
        None,
        "change attention_backend",
    ),
    (
        "vllm",
        "RuntimeError: Worker failed with error 'This flash attention build does not support "
        "headdim not being a multiple of 32.'\n",
        "unsupported_arch",
        ("attention_backend", "change"),
        "change attention_backend",
    ),
    # a capture failure that is not memory: the failing part off, never memory
    (
        "sglang",
        "Piecewise CUDA Graph failed with error: Tensor match failed\n",
        "graph_capture_other",
        ("piecewise_cuda_graph", "disable"),
        "disable piecewise_cuda_graph",
    ),
    (
        "vllm",
        "INFO 06-05 06:18:10 [gpu_model_runner.py:1] Capturing CUDA graphs (decode, FULL)\n"
        "RuntimeError: CUDA error: operation not permitted when stream is capturing\n",
        "graph_capture_other",
        None,
        "disable cuda_graph",
    ),
    # NCCL: the system (shared memory), never custom all-reduce nor memory
    (
        "sglang",
        "ncclSystemError: Error while creating shared memory segment /dev/shm/nccl-x (size 96)\n",
        "nccl_error",
        ("dev_shm", "check"),
        "enlarge dev_shm",
    ),
    (
        "vllm",
        "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)\n",
        "nccl_error",
        None,
        "check nccl",
    ),
    # an argument refused: that argument
    (
        "sglang",
        "launch_server.py: error: unrecognized arguments: --reasoning_parser kimi_k2\n",
        "bad_args",
        ("reasoning_parser", "fix"),
        "fix --reasoning-parser",
    ),
    (
        "vllm",
        "vllm: error: unrecognized arguments: --temperature 0.8\n",
        "bad_args",
        ("temperature", "fix"),
        "fix --temperature",
    ),
    # a port taken: another port
    (
        "sglang",
        "OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): "
        "address already in use\n",
        "port_in_use",
        ("port", "change"),
        "change port",
    ),
    (
        "vllm",
        "OSError: [Errno 98] Address already in use\n",
        "port_in_use",
        ("port", "change"),
        "change port",
    ),
    # a cause no setting cures, and a crash nothing decides: no knob
    (
        "sglang",
        "ValueError: Model architectures ['Glm4ForCausalLM'] are not supported for now.\n",
        "other_crash",
        None,
        "none",
    ),
    (
        "vllm",
        "ImportError: common_ops.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEa\n",
        "other_crash",
        None,
        "none",
    ),
    ("sglang", "RuntimeError: something no rule names\n", UNKNOWN_CRASH, None, "none"),
    (
        "vllm",
        "AttributeError: 'NoneType' object has no attribute 'x'\n",
        UNKNOWN_CRASH,
        None,
        "none",
    ),
]


def test_every_crash_category_is_checked_for_both_engines() -> None:
    assert {(engine, category) for engine, _, category, _, _ in CASES} == {
        (engine, category) for engine in RULES for category in CRASH_CATEGORIES
    }


@pytest.mark.parametrize(
    ("engine", "text", "category", "needed", "fix"),
    CASES,
    ids=[f"{c[0]}-{c[2]}" for c in CASES],
)
def test_advice_moves_the_knob_that_cures_the_cause_and_never_the_opposite(
    engine: str, text: str, category: str, needed: crashes.Move | None, fix: str
) -> None:
    verdict = crashes.classify_text(text, RULES[engine])
    assert verdict.category == category, verdict.evidence
    if needed is not None:
        assert needed in verdict.moves, verdict.moves
    assert wrong_way(category, fix, verdict.moves) is None, verdict.moves
    knobs = {knob for knob, _ in verdict.moves}
    fraction = FRACTION[engine]
    if category in ("oom_cuda_graph", "oom_runtime"):
        assert (fraction, "raise") not in verdict.moves or category == "oom_runtime"
    if category == "oom_kv_pool":
        assert (fraction, "lower") not in verdict.moves
    if category not in ("oom_kv_pool", "oom_cuda_graph", "oom_runtime"):
        assert not knobs & MEMORY
    if category in ("other_crash", UNKNOWN_CRASH):
        assert verdict.moves == ()


def test_the_benchmark_calls_a_move_against_the_fix_the_wrong_way() -> None:
    assert wrong_way(
        "oom_kv_pool", "raise gpu_memory_utilization", (("mem_fraction_static", "lower"),)
    )
    assert wrong_way(
        "unsupported_arch", "change attention_backend", (("cuda_graph_max_bs", "lower"),)
    )
    assert wrong_way("nccl_error", "check nccl", (("custom_all_reduce", "disable"),))
    assert wrong_way(
        "oom_cuda_graph", "lower cuda_graph_max_bs", (("mem_fraction_static", "raise"),)
    )
    assert (
        wrong_way("oom_kv_pool", "raise mem_fraction_static", (("mem_fraction_static", "raise"),))
        is None
    )


@pytest.mark.parametrize("engine", sorted(RULES))
def test_words_every_engine_shares_decide_alike(engine: str) -> None:
    def read(text: str) -> tuple[str, int | None]:
        verdict = crashes.classify_text(text, RULES[engine])
        return verdict.category, verdict.line_number

    headdim = "RuntimeError: This flash attention build does not support headdim 72.\n"
    assert read(headdim) == ("unsupported_arch", 1)
    backend = "ValueError: Attention backend 'sage_attn' is not supported by this attention layer\n"
    assert read(backend) == ("bad_args", 1)
    gloo = (
        "[rank1]:[E130 18:11:34.70 ProcessGroupGloo.cpp:143] Gloo connectFullMesh failed with x\n"
    )
    assert read(gloo) == ("nccl_error", 1)
    fa4 = 'assert arch // 10 == 10, "FP8 is only supported on SM100 (compute capability 10.x)"\n'
    assert read(fa4) == ("unsupported_arch", 1)
    host = "slurmstepd: error: Detected 1 oom_kill event in StepId=4.0.\n"
    assert read(host)[0] == "other_crash"
    symbol = "ImportError: /x/common_ops.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEa\n"
    assert read(symbol) == ("other_crash", 1)
    # the same words in a warning, or a traceback whose error no rule names, decide no cause
    assert read("WARNING: Gloo connectFullMesh failed once, retrying\n")[0] != "nccl_error"
    assert read("Traceback (most recent call last):\nKeyError: 'lm_head.weight'\n")[0] == (
        UNKNOWN_CRASH
    )
