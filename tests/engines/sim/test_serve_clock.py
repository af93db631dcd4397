"""The simulated box on a faster serving clock (``engine.sim.serve_scale`` below 1): the server is
told so, the engine says so, the client reads every time back in the box's seconds, and the GPU
hours are the box's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autotune._knobs import ServerConfig
from autotune.bench._client import RunRecords
from autotune.bench._metrics import RequestRecord
from autotune.engines import SimEngine, SimOptions, create_engine
from autotune.space import load_space

from .test_adapter import spec


def _space(tmp_path: Path, serve: str) -> Path:
    text = Path("search_spaces/eagle3.yaml").read_text()
    text = re.sub(r"(?m)^    time_scale: .*$", "    time_scale: 0.005", text)
    text = re.sub(r"(?m)^    serve_scale: .*\n", "", text)
    text = text.replace("    noise: 0.02", f"    noise: 0.02\n    serve_scale: {serve}")
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


def test_the_space_sets_the_serving_clock(tmp_path: Path) -> None:
    space = load_space(_space(tmp_path, "0.2"))
    assert space.engine.sim.serve_scale == 0.2
    engine = create_engine(space.engine)
    assert engine.serve_time_scale() == 0.2
    argv = engine.build_launch(ServerConfig(), port=1).argv
    assert argv[argv.index("--sim-serve-scale") + 1] == "0.2"


@pytest.mark.parametrize("bad", ["0", "-1", "1000", "fast"])
def test_a_serving_clock_out_of_bounds_is_refused(tmp_path: Path, bad: str) -> None:
    from autotune._errors import ConfigError

    with pytest.raises(ConfigError, match="serve_scale"):
        load_space(_space(tmp_path, bad))


def test_the_box_clock_is_the_default() -> None:
    engine = SimEngine(spec())
    assert engine.serve_time_scale() == 1.0
    assert "--sim-serve-scale" not in engine.build_launch(ServerConfig(), port=1).argv
    assert SimEngine(spec(sim=SimOptions(serve_scale=0.1))).serve_time_scale() == 0.1


def _records() -> tuple[RequestRecord, ...]:
    return tuple(
        RequestRecord(
            index=i,
            start=0.1 * i,
            ttft=0.05,
            e2e=0.05 + 0.01 * 9,
            chunk_times=tuple(0.05 + 0.01 * k for k in range(10)),
            chunk_tokens=tuple(range(1, 11)),
            prompt_tokens=100,
            completion_tokens=10,
        )
        for i in range(4)
    )


def test_the_client_reads_times_in_the_box_seconds() -> None:
    wall = RunRecords("http://x", "completions", _records(), None).result()
    box = RunRecords("http://x", "completions", _records(), None, time_scale=0.1).result()
    assert box.ttft_median_ms == pytest.approx(wall.ttft_median_ms * 10)  # type: ignore[operator]
    assert box.itl_median_ms == pytest.approx(wall.itl_median_ms * 10)  # type: ignore[operator]
    assert box.e2e_p99_ms == pytest.approx(wall.e2e_p99_ms * 10)  # type: ignore[operator]
    assert box.output_tok_s == pytest.approx(wall.output_tok_s / 10)


def test_gpu_hours_count_the_box_time(tmp_path: Path) -> None:
    from autotune.study._feasibility import Feasibility
    from autotune.study._record import Outcome, TrialRecord
    from autotune.study._trial import ServerEvaluator, TrialRunner

    space = load_space(_space(tmp_path, "0.1"))  # start-up at 0.005 of the box's, serving 0.1
    engine = create_engine(space.engine)
    evaluator = ServerEvaluator(TrialRunner(space, engine, Feasibility(space, engine)))
    record = TrialRecord(outcome=Outcome.OK, role="search", startup_s=3.6, value=1.0)
    # 3.6 s of start-up stand for 720 s, the 2 s of serving that followed for 20 s; 8 GPUs held
    assert evaluator.gpu_seconds(record, 5.6, 8) == pytest.approx((720 + 20) * 8)
