"""Record one real server's start, endpoints, repeated benchmarks and stop (a GPU box only).

    python tests/gpu/record_server.py --space search_spaces/real-h100-tiny.yaml \
        --config '{"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 8}' \
        --runs 5 --out /tmp/realrun/noise-1

Starts the configuration through autotune's own engine and process code, waits until it is
ready, saves ``/get_server_info``, ``/get_model_info``, ``/metrics`` (before and after the runs)
and the benchmark of each run (``run-N.json``: the workload of the space, one repeat each), then
stops the server and polls the GPU's memory until it is back (``stop.json``: seconds to each
level). Writes ``summary.json`` with the per-run throughput and accept length. The figures feed
the noise note in tests/data/real/README.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx

from autotune._knobs import ServerConfig
from autotune.bench import BenchmarkClient, ClientOptions, measure_sync
from autotune.crashes import LiveClassifier
from autotune.engines import create_engine
from autotune.server import ServerProcess, find_free_port, wait_for_startup
from autotune.space import load_space


def gpu_used_mib() -> list[int]:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return [int(x) for x in out.split() if x.strip().isdigit()]


def save(folder: Path, name: str, url: str, path: str) -> None:
    try:
        r = httpx.get(url + path, timeout=30)
        (folder / name).write_text(r.text)
    except httpx.HTTPError as e:
        (folder / name).write_text(f"ERROR {type(e).__name__}: {e}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--space", required=True)
    ap.add_argument("--config", required=True, help="knobs as JSON (the space's fixed ones added)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    space = load_space(args.space)
    engine = create_engine(space.engine)
    config = ServerConfig.from_params(
        {**space.fixed, **json.loads(args.config), "tp_size": space.engine.tp_size}
    )
    port = find_free_port(space.engine.host, preferred=space.engine.port)
    launch = engine.build_launch(config, port=port, workload=space.workload)
    (out / "command.json").write_text(json.dumps({"argv": list(launch.argv), "env": launch.env}))
    before = gpu_used_mib()
    started = time.monotonic()
    proc = ServerProcess.launch(launch, log_path=out / "server.log")
    summary: dict[str, object] = {"config": config.to_params(), "gpu_mib_before": before}
    try:
        startup = wait_for_startup(
            proc,
            classifier=LiveClassifier(engine.crash_rules()),
            readiness=engine.readiness(),
            url=launch.url,
            timeout_s=space.engine.timeouts.startup_s,
        )
        summary["startup"] = {
            "status": startup.status,
            "category": startup.category,
            "seconds": round(startup.startup_s, 2),
            "failure_line": startup.failure_line,
        }
        if startup.ready:
            summary["gpu_mib_ready"] = gpu_used_mib()
            for name, path in (
                ("server_info.json", "/get_server_info"),
                ("model_info.json", "/get_model_info"),
                ("metrics-before.txt", "/metrics"),
                ("health_generate.txt", "/health_generate"),
            ):
                save(out, name, launch.url, path)
            options = ClientOptions.from_timeouts(
                space.engine.timeouts, server_api=engine.server_api()
            )
            client = BenchmarkClient(launch.url, options)
            runs = []
            for n in range(args.runs):
                m = measure_sync(client, space.workload.with_changes(repeats=1))
                (out / f"run-{n + 1}.json").write_text(json.dumps(m.to_dict(), indent=1))
                save(out, f"server_info-after-run-{n + 1}.json", launch.url, "/get_server_info")
                runs.append(
                    {
                        "output_tok_s": m.medians.get("output_tok_s"),
                        "accept_length": m.medians.get("accept_length"),
                        "sources": list(m.acceptance_sources),
                    }
                )
            summary["runs"] = runs
            save(out, "metrics-after.txt", launch.url, "/metrics")
    finally:
        stop_at = time.monotonic()
        outcome = proc.stop()
        levels = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            used = gpu_used_mib()
            levels.append((round(time.monotonic() - stop_at, 2), used))
            if used and before and all(u <= b + 256 for u, b in zip(used, before, strict=False)):
                break
            time.sleep(0.25)
        summary["stop"] = {
            "forced": outcome.forced,
            "survivors": list(outcome.survivors),
            "gpu_mib_levels": levels[:: max(1, len(levels) // 20)] + levels[-1:],
            "released_after_s": levels[-1][0] if levels else None,
        }
        summary["wall_s"] = round(time.monotonic() - started, 2)
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
