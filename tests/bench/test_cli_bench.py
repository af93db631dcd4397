"""`autotune bench run` and `autotune bench client-capacity` through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.cli import main

from ._server import ProtocolServer

pytestmark = pytest.mark.timeout(60)

SMALL = ["--num-prompts", "4", "--concurrency", "2", "--input-len", "8", "--output-len", "6"]


def test_run_prints_json(sglang_server: ProtocolServer, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "run", "--url", sglang_server.url, *SMALL, "--warmup", "0", "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["repeats"] == 1
    first = data["results"][0]
    assert first["completed"] == 4 and first["failed"] == 0
    assert first["total_output_tokens"] == 24
    assert data["medians"]["output_tok_s"] == first["output_tok_s"]
    assert len(sglang_server.seen.bodies) == 4


def test_run_prints_a_table_with_repeats(
    sglang_server: ProtocolServer, capsys: pytest.CaptureFixture[str]
) -> None:
    sglang_server.behaviour.decide = lambda seq, body: "500" if seq == 3 else "ok"
    code = main(["bench", "run", "--url", sglang_server.url, *SMALL, "--repeats", "2"])
    assert code == 0
    out = capsys.readouterr().out
    assert "Output token throughput (tok/s)" in out
    assert "run 2" in out and "median" in out
    assert "TTFT p99 (ms)" in out
    assert "acceptance source: request_meta_info" in out
    assert "failed requests: 1 http_500" in out


def test_workload_file_with_overrides(
    sglang_server: ProtocolServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "a b c"}\n{"prompt": "d e"}\n')
    spec = tmp_path / "w.yaml"
    spec.write_text(
        "workload:\n  source: jsonl\n  path: prompts.jsonl\n  api: completions\n"
        "  num_prompts: 2\n  warmup: 0\n  output_len: 5\n"
    )
    args = ["--url", sglang_server.url, "--workload", str(spec), "--output-len", "3", "--json"]
    code = main(["bench", "run", *args])
    assert code == 0
    first = json.loads(capsys.readouterr().out)["results"][0]
    assert first["total_output_tokens"] == 2 * 3  # the option overrides the file
    assert sorted(b["prompt"] for b in sglang_server.seen.bodies) == ["a b c", "d e"]


def test_bad_workload_file_is_a_located_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "w.yaml"
    spec.write_text("api: generate\nconcurrency: [1\n")
    code = main(["bench", "run", "--url", "http://127.0.0.1:1", "--workload", str(spec)])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{spec}:line" in err and "Traceback" not in err
    spec.write_text("api: grpc\n")
    assert main(["bench", "run", "--url", "http://127.0.0.1:1", "--workload", str(spec)]) == 2
    assert "workload.api" in capsys.readouterr().err


def test_unreachable_url_is_a_message_not_a_traceback(
    dead_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["bench", "run", "--url", dead_url, *SMALL])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("autotune: error: cannot connect to the server")
    assert dead_url in err and "Traceback" not in err


def test_client_capacity_against_a_running_server(
    sglang_server: ProtocolServer, capsys: pytest.CaptureFixture[str]
) -> None:
    sglang_server.behaviour.chunk_delay_s = 0.001
    args = ["--url", sglang_server.url, "--concurrency", "4", "--seconds", "1"]
    code = main(["bench", "client-capacity", *args, "--output-len", "64", "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["concurrency"] == 4
    assert 0 < data["streamed_tokens"] <= sglang_server.seen.accepted_total
    assert data["requests_failed"] == 0
    if data["requests_cut"] == 0:
        assert data["streamed_tokens"] == 64 * data["requests_completed"]
    assert data["cpu_ms_per_1k_tokens"] > 0
