"""``autotune sim``: run the simulated SGLang or vLLM server, or ask its model directly."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import typer

from autotune._errors import ConfigError

app = typer.Typer(
    no_args_is_help=True,
    help="The simulated SGLang or vLLM server: start one, or evaluate a configuration without one.",
)

_DEFAULT_PROFILE = "rtxpro6000x8-kimi-k2.5"


@app.command(
    "serve",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def serve(ctx: typer.Context) -> None:
    """Start a simulated server: SGLang's flags plus --sim-* options (see serve --help)."""
    from autotune.sim.__main__ import main

    raise typer.Exit(main(list(ctx.args), prog="autotune sim serve"))


@app.command("eval")
def evaluate(
    profile: str = typer.Option(
        _DEFAULT_PROFILE, "--profile", metavar="NAME_OR_PATH", help="profile name or file"
    ),
    workload: str | None = typer.Option(
        None, "--workload", metavar="NAME", help="a workload of the profile (default: its own)"
    ),
    engine: str = typer.Option(
        "sglang",
        "--engine",
        metavar="ENGINE",
        help="whose rules start the server: sglang (mem_fraction_static, EAGLE trees) or vllm "
        "(gpu_memory_utilization, one draft chain)",
    ),
    param: list[str] = typer.Option(  # noqa: B008
        [], "--param", metavar="KNOB=VALUE", help="canonical knob name and value (repeatable)"
    ),
    env: list[str] = typer.Option(  # noqa: B008
        [], "--env", metavar="NAME=VALUE", help="server environment, e.g. NCCL_ALGO=Tree"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the verdict as JSON"),
) -> None:
    """Print the model's verdict for one configuration, without starting a server."""
    from autotune._knobs import ServerConfig
    from autotune.sim._model import ENGINES, SimModel
    from autotune.sim._profile import load_profile

    if engine not in ENGINES:
        raise ConfigError(
            f"no simulated engine {engine!r}", source="--engine", hint="use " + " or ".join(ENGINES)
        )
    params = _pairs(param, "--param")
    environment = _pairs(env, "--env")
    config = ServerConfig.from_params(params, source="--param")
    loaded = load_profile(profile)
    spec = loaded.workload(workload)
    verdict = SimModel(loaded, engine=engine).evaluate(config, spec, env=environment)
    data = dataclasses.asdict(verdict)
    data.pop("requests", None)  # one tuple per request: not for the terminal
    if as_json:
        data["profile"] = loaded.name
        data["engine"] = engine
        data["workload"] = spec.name
        data["config"] = config.to_params()
        typer.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    typer.echo(_summary(loaded.name, spec.name, config.to_params(), data))


@app.command("calibration")
def calibration() -> None:
    """The calibration targets of the shipped profiles and the figures the model reaches."""
    from autotune.sim._calibration import Calibration, format_checks

    checks = Calibration().checks()
    typer.echo(format_checks(checks))
    if not all(c.ok for c in checks):
        raise typer.Exit(1)


def _pairs(items: list[str], option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"expected NAME=VALUE, got {item!r}",
                source=option,
                hint=f"for example {option} "
                + ("speculative_num_steps=3" if option == "--param" else "NCCL_ALGO=Tree"),
            )
        out[key.strip()] = value.strip()
    return out


def _fmt(value: Any, unit: str = "", digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}{unit}"
    return f"{value}{unit}"


def _summary(profile: str, workload: str, params: dict[str, Any], d: dict[str, Any]) -> str:
    knobs = ", ".join(f"{k}={v}" for k, v in params.items()) or "defaults"
    lines = [f"profile {profile}, workload {workload}", f"config: {knobs}"]
    if d["status"] != "ok":
        lines.append(f"status: {d['status']} after {_fmt(d['startup_s'], ' s', 1)} of start-up")
        lines.append(f"failure: {d['failure_line']}")
        return "\n".join(lines)
    lines += [
        f"status: ok, start-up {_fmt(d['startup_s'], ' s', 1)}",
        f"output throughput: {_fmt(d['output_tok_s'], ' tok/s')}",
        f"accept length: {_fmt(d['accept_length'])}, accept rate: {_fmt(d['accept_rate'])}",
        "latency (ms)" + "".join(f"{stat:>9}" for stat in _LATENCY_STATS),
        *(_latency_row(label, family, d) for label, family in _LATENCY_ROWS),
        f"KV pool: {_fmt(d['kv_tokens'])} tokens, max running requests: "
        f"{_fmt(d['max_running_requests'])}, mean running: {_fmt(d['mean_running'], '', 1)}",
    ]
    return "\n".join(lines)


#: The latency rows of the summary: label and figure family (``<family>_<stat>_ms``), as the
#: benchmark client reports them.
_LATENCY_ROWS = (("TTFT", "ttft"), ("ITL", "itl"), ("TPOT", "tpot"), ("E2E", "e2e"))
_LATENCY_STATS = ("mean", "median", "p90", "p99")


def _latency_row(label: str, family: str, d: dict[str, Any]) -> str:
    cells = (d.get(f"{family}_{stat}_ms") for stat in _LATENCY_STATS)
    return f"  {label:<10}" + "".join(f"{_fmt(v, '', 2):>9}" for v in cells)
