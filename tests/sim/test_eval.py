"""``autotune sim eval``: the model's verdict without a server, and its agreement with one."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from autotune._knobs import ServerConfig
from autotune.cli import main
from autotune.engines import EngineSpec, SimOptions, create_engine

from ._procs import SEED_MODEL, SEED_PROFILE, SimLauncher

SEED_EAGLE = [
    "tp_size=8", "speculative_algorithm=EAGLE3", "speculative_num_steps=2",
    "speculative_eagle_topk=4", "speculative_num_draft_tokens=4", "cuda_graph_max_bs=128",
    "allreduce=nccl",
]  # fmt: skip


def run_eval(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["sim", "eval", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def params(*pairs: str) -> list[str]:
    return [arg for pair in pairs for arg in ("--param", pair)]


def verdict(capsys: pytest.CaptureFixture[str], *pairs: str) -> dict[str, Any]:
    code, out, err = run_eval(capsys, "--json", *params(*pairs))
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def test_json_verdict_of_a_running_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    data = verdict(capsys, *SEED_EAGLE, "mem_fraction_static=0.88")
    for key in ("status", "output_tok_s", "accept_length", "accept_rate", "startup_s",
                "failure_line", "kv_tokens", "max_running_requests"):  # fmt: skip
        assert key in data
    assert data["status"] == "ok" and data["failure_line"] is None
    assert data["output_tok_s"] > 0 and data["accept_length"] > 1
    assert data["max_running_requests"] == 48
    assert data["config"]["speculative_num_steps"] == 2


def test_auto_and_none_values_are_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    data = verdict(capsys, "tp_size=8", "speculative_algorithm=none", "mem_fraction_static=auto")
    assert data["status"] == "ok"
    assert data["accept_length"] is None
    assert "mem_fraction_static" not in data["config"]


def test_crash_verdict_names_the_line_the_server_prints(
    capsys: pytest.CaptureFixture[str], sim: SimLauncher
) -> None:
    data = verdict(capsys, *SEED_EAGLE, "mem_fraction_static=0.76")
    assert data["status"] == "oom_kv_pool"
    assert data["output_tok_s"] is None
    code, log = sim.run(
        "--tp", "8", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2",
        "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "4",
        "--cuda-graph-max-bs-decode", "128", "--disable-custom-all-reduce",
        "--mem-fraction-static", "0.76", profile=SEED_PROFILE, model=SEED_MODEL,
    )  # fmt: skip
    assert code != 0
    assert data["failure_line"] in log.splitlines()


def test_vllms_rules_start_the_server_with_engine_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    """``--engine vllm``: vLLM's memory rule (a share of the whole GPU) and its own crash line,
    the very line the simulated vLLM server prints for the same configuration."""
    knobs = ("speculative_algorithm=EAGLE3", "speculative_num_steps=3", "tp_size=1")
    profile = ("--profile", "h100-llama-3.1-8b", "--engine", "vllm", "--json")

    def vllm(share: float) -> dict[str, Any]:
        code, out, err = run_eval(
            capsys, *profile, *params(*knobs, f"gpu_memory_utilization={share}")
        )
        assert code == 0, err
        data: dict[str, Any] = json.loads(out)
        assert data["engine"] == "vllm"
        return data

    ok, starved = vllm(0.9), vllm(0.2)
    assert ok["status"] == "ok" and ok["accept_length"] > 1
    assert (
        starved["status"] == "oom_kv_pool" and "gpu_memory_utilization" in starved["failure_line"]
    )
    spec = EngineSpec(
        kind="sim-vllm",
        model_path="meta-llama/Llama-3.1-8B-Instruct",
        draft_model_path="/models/eagle3",
        sim=SimOptions(profile="h100-llama-3.1-8b", time_scale=0.0001, noise=0.0),
    )
    config = ServerConfig.from_params(dict(k.split("=") for k in knobs), source="test")
    argv = create_engine(spec).build_launch(config.replace(gpu_memory_utilization=0.2), port=0)
    done = subprocess.run(argv.argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert starved["failure_line"] in done.stdout + done.stderr


def test_readable_summary(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_eval(capsys, "--profile", "h100-llama-3.1-8b", "--workload", "chat-c16")
    assert code == 0
    assert "h100-llama-3.1-8b" in out and "chat-c16" in out
    assert "status: ok" in out and "tok/s" in out
    code, raw, _ = run_eval(
        capsys, "--profile", "h100-llama-3.1-8b", "--workload", "chat-c16", "--json"
    )
    data = json.loads(raw)
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line[:2] == "  "}
    for label in ("TTFT", "ITL", "TPOT", "E2E"):
        shown = [float(cell) for cell in rows[label]]
        figures = [data[f"{label.lower()}_{stat}_ms"] for stat in ("mean", "median", "p90", "p99")]
        assert shown == pytest.approx(figures, abs=0.005), label
    # one decode pass at batch 16 on an H100, not a fast-forwarded run of them
    assert 5.0 < data["itl_p99_ms"] < 10.0


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--param", "speculative_steps=3"], "unknown knob 'speculative_steps'"),
        (["--param", "tp_size=eight"], "tp_size='eight' is not allowed"),
        (["--param", "mem_fraction_static=1.2"], "mem_fraction_static"),
        (["--param", "tp_size"], "expected NAME=VALUE"),
        (["--env", "NCCL_ALGO"], "expected NAME=VALUE"),
        (["--workload", "nope"], "has no workload 'nope'"),
        (["--profile", "nope"], "unknown simulator profile 'nope'"),
        (["--engine", "vlm"], "no simulated engine 'vlm'"),
    ],
)
def test_mistakes_are_clear_messages_with_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], fragment: str
) -> None:
    code, out, err = run_eval(capsys, *args)
    assert code == 2
    assert fragment in err
    assert "Traceback" not in err and out == ""
