"""SGLang's memory lines: read from real and simulated logs, and the crashes they predict."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune._knobs import ServerConfig
from autotune.crashes import classify_text
from autotune.engines import MemoryReading
from autotune.engines.sglang import SGLANG_CRASH_RULES
from autotune.engines.sglang._memory import MARGIN_GIB, memory_refusal, read_memory
from autotune.sim._memory import plan_memory
from autotune.sim._profile import load_profile

DATA = Path(__file__).parent / "data" / "memory"
DRAFT = "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B"
PROFILE = "h100-llama-3.1-8b"
READY = "The server is fired up and ready to roll!"

#: Large CUDA graphs (256 x (32 draft tokens + top-k 4) tokens) that fit at 0.80 on the H100.
BIG_GRAPHS = ServerConfig(
    speculative_algorithm="EAGLE3",
    speculative_num_steps=8,
    speculative_eagle_topk=4,
    speculative_num_draft_tokens=32,
    cuda_graph_max_bs=256,
    mem_fraction_static=0.80,
)


def lines(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8").splitlines()


# --- real SGLang logs --------------------------------------------------------------------
def test_a_real_pool_and_graph_capture_are_read() -> None:
    # the excerpt does not show the command: read as if launched at 0.85
    reading = read_memory(lines("pr11830_b200_graphs.log"), ServerConfig(mem_fraction_static=0.85))
    assert reading is not None
    assert reading.kv_tokens == 2243474
    assert reading.kv_gib == pytest.approx(59.91 + 59.91)
    assert reading.free_after_pool_gib == 40.03
    assert reading.total_gib == pytest.approx(40.03 / 0.15, abs=1e-3)
    assert (reading.graph_max_bs, reading.graph_gib, reading.free_after_graphs_gib) == (
        512,
        1.44,
        38.05,
    )
    assert reading.weights_gib is None  # the excerpt starts after the weights


def test_without_a_fraction_nothing_is_read() -> None:
    # an automatic fraction that the log does not state: no budget to predict from
    assert read_memory(lines("pr11830_b200_graphs.log"), ServerConfig()) is None


def test_interleaved_ranks_give_each_figure_from_the_lowest_rank_that_printed_it() -> None:
    reading = read_memory(
        lines("pr11716_tp8_interleaved.log"), ServerConfig(mem_fraction_static=0.9, tp_size=8)
    )
    assert reading is not None
    assert reading.kv_tokens == 2795207 and reading.kv_gib == pytest.approx(106.62)
    assert reading.free_after_pool_gib == 11.87
    assert reading.graph_gib is None and not reading.has_graphs  # capture had not ended


def test_a_kv_line_that_names_its_dtype_first() -> None:
    config = ServerConfig(mem_fraction_static=0.8, tp_size=2)  # as if launched at 0.8
    reading = read_memory(lines("pr27537_musa_dtype.log"), config)
    assert reading is not None
    assert (reading.kv_tokens, reading.kv_gib) == (1106304, pytest.approx(50.64))
    assert reading.free_after_pool_gib == 12.05 and not reading.has_graphs


def test_a_pool_larger_than_its_k_and_v_sizes_is_predicted_from_what_the_weights_left() -> None:
    config = ServerConfig(mem_fraction_static=0.9)  # as if launched at 0.9
    reading = read_memory(lines("pr4826_gemma3_weights_pool.log"), config)
    assert reading is not None
    assert (reading.weights_gib, reading.free_after_weights_gib) == (8.13, 131.08)
    assert reading.kv_gib == pytest.approx(108.24)
    total = 14.61 / 0.1
    # by the printed K + V (108.24 GiB) 0.12 would leave no pool; the weights left 116.47 GiB
    # for it, so 0.12 still holds one and is not refused
    assert 108.24 + total * (0.12 - 0.9) < -1.0 < 116.47 + total * (0.12 - 0.9)
    assert memory_refusal(reading, dataclasses.replace(config, mem_fraction_static=0.12)) is None
    low = memory_refusal(reading, dataclasses.replace(config, mem_fraction_static=0.08))
    assert low is not None and low.category == "oom_kv_pool"
    assert "116.47 + 146.10 x (0.08 - 0.9) = -3.33 GiB" in low.reason


# --- the simulator's lines ----------------------------------------------------------------
class Sim:
    """Starts ``python -m autotune.sim`` (the H100 profile) as a process of its own, logging to a
    file; every server it started is killed at the end of the test."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        log = self.folder / f"sim-{len(self.procs)}.log"
        argv = [
            sys.executable,
            "-m",
            "autotune.sim",
            "--model-path",
            "meta-llama/Llama-3.1-8B-Instruct",
        ]
        argv += ["--host", "127.0.0.1", "--port", str(port), "--sim-profile", PROFILE]
        argv += ["--sim-time-scale", "0.0001", *args]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.procs.append(proc)
        return proc, log

    def ready_log(self, *args: str) -> str:
        """The log of a server that reached its ready line (then stopped)."""
        proc, log = self.spawn(*args)
        deadline = time.monotonic() + 60
        while READY not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        return log.read_text(errors="replace")

    def crash_log(self, *args: str) -> tuple[int, str]:
        """The exit status and log of a server that exits by itself."""
        proc, log = self.spawn(*args)
        return proc.wait(timeout=60), log.read_text(errors="replace")

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    launcher = Sim(tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()


def sim_args(config: ServerConfig) -> list[str]:
    args = ["--mem-fraction-static", str(config.mem_fraction_static)]
    if config.speculative:
        args += ["--speculative-algorithm", config.speculative_algorithm]
        args += ["--speculative-draft-model-path", DRAFT]
        args += ["--speculative-num-steps", str(config.speculative_num_steps)]
        args += ["--speculative-eagle-topk", str(config.speculative_eagle_topk)]
        args += ["--speculative-num-draft-tokens", str(config.speculative_num_draft_tokens)]
    if config.cuda_graph_max_bs is not None:
        args += ["--cuda-graph-max-bs-decode", str(config.cuda_graph_max_bs)]
    return args


def sim_reading(sim: Sim, config: ServerConfig) -> MemoryReading:
    reading = read_memory(sim.ready_log(*sim_args(config)).splitlines(), config)
    assert reading is not None
    return reading


def test_the_simulators_lines_give_its_memory_plan(sim: Sim) -> None:
    reading = sim_reading(sim, BIG_GRAPHS)
    plan = plan_memory(load_profile(PROFILE), BIG_GRAPHS).plan
    assert reading.total_gib == pytest.approx(plan.total_gib, abs=0.01)
    assert reading.weights_gib == round(plan.target_weights_gib, 2)
    assert reading.draft_weights_gib == round(plan.draft_weights_gib, 2)
    assert reading.kv_tokens == plan.kv_tokens
    assert reading.kv_gib == round(plan.kv_pool_gib, 2)
    assert reading.free_after_pool_gib == round(plan.free_after_static_gib, 2)
    assert (reading.graph_max_bs, reading.graph_gib) == (256, round(plan.graph_gib, 2))
    assert MemoryReading.from_dict(reading.to_dict()) == reading


def test_an_automatic_fraction_is_read_from_the_arguments_the_server_printed(
    sim: Sim,
) -> None:
    reading = read_memory(sim.ready_log().splitlines(), ServerConfig())
    profile = load_profile(PROFILE)
    assert reading is not None
    assert (
        reading.mem_fraction_static == plan_memory(profile, ServerConfig()).plan.mem_fraction_static
    )
    assert reading.total_gib == pytest.approx(profile.hardware.memory_gib, abs=0.05)


def test_predicted_crashes_are_the_simulators(sim: Sim) -> None:
    reading = sim_reading(sim, BIG_GRAPHS)
    graphs = memory_refusal(reading, dataclasses.replace(BIG_GRAPHS, mem_fraction_static=0.90))
    assert graphs is not None and graphs.category == "oom_cuda_graph"
    assert "79.65 x (1 - 0.9) = 7.96 GiB" in graphs.reason and "11.36 >" in graphs.reason
    kv = memory_refusal(reading, dataclasses.replace(BIG_GRAPHS, mem_fraction_static=0.20))
    assert kv is not None and kv.category == "oom_kv_pool"
    assert "45.96 + 79.65 x (0.2 - 0.8) = -1.83 GiB" in kv.reason
    for refused, fraction in ((graphs, 0.90), (kv, 0.20)):
        config = dataclasses.replace(BIG_GRAPHS, mem_fraction_static=fraction)
        code, log = sim.crash_log(*sim_args(config))
        assert code != 0
        assert classify_text(log, SGLANG_CRASH_RULES).category == refused.category, log
    # the room the graph refusal computed is what the server had when capture began
    code, log = sim.crash_log(*sim_args(dataclasses.replace(BIG_GRAPHS, mem_fraction_static=0.9)))
    room = re.search(r"Capture cuda graph begin\..* avail mem=([\d.]+) GB", log)
    assert room is not None and float(room.group(1)) == pytest.approx(7.96, abs=0.011)
    # and the simulator's own memory plan has the figures of the arithmetic
    profile = load_profile(PROFILE)
    high = plan_memory(profile, dataclasses.replace(BIG_GRAPHS, mem_fraction_static=0.9))
    assert high.failure == "graph" and high.plan.graph_gib == pytest.approx(11.36, abs=0.005)
    assert high.plan.free_after_static_gib == pytest.approx(7.96, abs=0.006)
    low = plan_memory(profile, dataclasses.replace(BIG_GRAPHS, mem_fraction_static=0.2)).plan
    pool = low.total_gib * 0.2 - low.context_gib - low.target_weights_gib - low.draft_weights_gib
    assert pool == pytest.approx(-1.83, abs=0.01)


# --- what is not predicted ----------------------------------------------------------------
def reading_of(**changes: object) -> MemoryReading:
    base = MemoryReading(
        mem_fraction_static=0.8,
        total_gib=79.65,
        weights_gib=14.96,
        draft_weights_gib=1.9,
        free_after_weights_gib=61.89,
        kv_tokens=365095,
        kv_gib=45.96,
        free_after_pool_gib=15.93,
        graph_max_bs=256,
        graph_gib=11.36,
        free_after_graphs_gib=4.57,
        speculative_algorithm="EAGLE3",
        speculative_num_steps=8,
        speculative_eagle_topk=4,
        speculative_num_draft_tokens=32,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def at(**changes: object) -> ServerConfig:
    return dataclasses.replace(BIG_GRAPHS, **changes)  # type: ignore[arg-type]


def test_only_clear_predictions_refuse() -> None:
    reading = reading_of()
    # the pool's edge is at 0.8 - 45.96 / 79.65 = 0.2230: refused only past the margin
    edge = 0.8 - 45.96 / 79.65
    assert memory_refusal(reading, at(mem_fraction_static=round(edge, 3))) is None
    step = (MARGIN_GIB + 0.02) / 79.65
    assert memory_refusal(reading, at(mem_fraction_static=round(edge - step - 0.001, 3)))
    # graphs of 11.36 GiB: 0.85 leaves 11.95 GiB (too little with activations, but not clearly)
    assert memory_refusal(reading, at(mem_fraction_static=0.85)) is None
    assert memory_refusal(reading, at(mem_fraction_static=0.87)) is not None


@pytest.mark.parametrize(
    "config",
    [
        at(mem_fraction_static=0.9, cuda_graph_max_bs=128),  # fewer graphs
        at(mem_fraction_static=0.9, speculative_num_draft_tokens=16),  # narrower verify
        at(mem_fraction_static=0.9, speculative_eagle_topk=2, speculative_num_draft_tokens=16),
        at(mem_fraction_static=0.9, disable_cuda_graph=True),
        at(mem_fraction_static=0.9, speculative_algorithm="EAGLE"),  # another draft model
        at(mem_fraction_static=0.2, tp_size=2),  # other GPUs' share
        at(mem_fraction_static=0.2, allreduce="nccl"),  # other buffers
        at(mem_fraction_static=None),  # SGLang's automatic fraction
    ],
)
def test_nothing_is_predicted_for_what_the_reading_does_not_bound(config: ServerConfig) -> None:
    assert memory_refusal(reading_of(), config) is None


def test_a_start_without_speculation_bounds_the_pool_of_one_with_it() -> None:
    plain = reading_of(
        speculative_algorithm="none",
        speculative_num_steps=None,
        speculative_eagle_topk=None,
        speculative_num_draft_tokens=None,
        draft_weights_gib=None,
        free_after_weights_gib=63.79,
        kv_gib=47.86,
        graph_gib=0.61,
    )
    low = memory_refusal(plain, at(mem_fraction_static=0.18))
    assert low is not None and "at most" in low.reason
    # a start with speculation says nothing of one without: its draft took from the pool
    assert (
        memory_refusal(reading_of(), at(mem_fraction_static=0.18, speculative_algorithm="none"))
        is None
    )


def test_damaged_records_read_as_none() -> None:
    assert MemoryReading.from_dict({"kv_gib": 3.0}) is None  # no fraction
    assert MemoryReading.from_dict({"mem_fraction_static": "0.8"}) is None
    assert MemoryReading.from_dict({"mem_fraction_static": 0.8, "kv_gib": "lots"}) is None
    assert MemoryReading.from_dict([1, 2]) is None
    kept = reading_of().to_dict() | {"from_a_later_version": 1}
    assert MemoryReading.from_dict(kept) == reading_of()
