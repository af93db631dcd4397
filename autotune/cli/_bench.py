"""`autotune bench` commands: measure a running server, measure the client itself."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autotune._errors import ConfigError

if TYPE_CHECKING:
    from autotune.bench import Measurement, WorkloadSpec

app = typer.Typer(
    no_args_is_help=True,
    help="Benchmark an SGLang-compatible server, or the benchmark client itself.",
)

#: Rows of the result table: (label, metric name, number format).
_ROWS: tuple[tuple[str, str, str], ...] = (
    ("Successful requests", "completed", ".0f"),
    ("Failed requests", "failed", ".0f"),
    ("Benchmark duration (s)", "duration_s", ".2f"),
    ("Total input tokens", "total_input_tokens", ".0f"),
    ("Total generated tokens", "total_output_tokens", ".0f"),
    ("Request throughput (req/s)", "request_throughput", ".2f"),
    ("Output token throughput (tok/s)", "output_tok_s", ".2f"),
    ("Total token throughput (tok/s)", "total_tok_s", ".2f"),
    ("Concurrency", "concurrency", ".2f"),
    ("Accept length", "accept_length", ".3f"),
    ("Accept rate", "accept_rate", ".3f"),
)
_LATENCY_ROWS = (("E2E latency", "e2e"), ("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"))


@app.command("run")
def run(
    url: Annotated[str, typer.Option(help="The server, e.g. http://127.0.0.1:30000.")],
    workload: Annotated[
        Path | None,
        typer.Option(help="A workload YAML file (a mapping, or one under a 'workload' key)."),
    ] = None,
    api: Annotated[
        str | None, typer.Option(help="generate (SGLang's /generate), completions or chat.")
    ] = None,
    concurrency: Annotated[int | None, typer.Option(min=1, help="Requests in flight.")] = None,
    num_prompts: Annotated[int | None, typer.Option(min=1, help="Measured requests.")] = None,
    input_len: Annotated[int | None, typer.Option(min=1, help="Prompt tokens.")] = None,
    output_len: Annotated[int | None, typer.Option(min=1, help="Output tokens.")] = None,
    temperature: Annotated[
        float | None, typer.Option(min=0.0, help="Sampling temperature.")
    ] = None,
    request_rate: Annotated[
        float | None,
        typer.Option(min=0.0, help="Poisson arrivals per second (default: closed loop)."),
    ] = None,
    warmup: Annotated[
        int | None, typer.Option(min=0, help="Warm-up requests, not measured.")
    ] = None,
    seed: Annotated[int | None, typer.Option(min=0, help="Seed of lengths and prompts.")] = None,
    repeats: Annotated[int | None, typer.Option(min=1, help="Runs of the workload.")] = None,
    timeout: Annotated[float, typer.Option(min=0.1, help="Seconds allowed for each run.")] = 1800.0,
    read_timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds a stream may stay silent before it fails.")
    ] = 300.0,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="AUTOTUNE_API_KEY", help="The server's --api-key, sent as a bearer token."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
    requests: Annotated[
        bool, typer.Option("--requests", help="With --json, add every request's record.")
    ] = False,
) -> None:
    """Benchmark a running server with SGLang bench_serving's definitions.

    Explicit options override the workload file's values.
    """
    from autotune.bench import BenchmarkClient, ClientOptions, measure_sync

    url = check_url(url)
    _finite(
        temperature=temperature,
        request_rate=request_rate,
        timeout=timeout,
        read_timeout=read_timeout,
    )
    spec = _workload(
        workload,
        api=api,
        concurrency=concurrency,
        num_prompts=num_prompts,
        input_len=input_len,
        output_len=output_len,
        temperature=temperature,
        request_rate=request_rate,
        warmup=warmup,
        seed=seed,
        repeats=repeats,
    )
    options = ClientOptions.with_api_key(
        api_key, benchmark_timeout_s=timeout, read_timeout_s=read_timeout
    )
    measurement = measure_sync(BenchmarkClient(url, options), spec)
    if as_json:
        typer.echo(json.dumps(measurement.to_dict(requests=requests), indent=2))
    else:
        _print_table(measurement, spec)


@app.command("client-capacity")
def client_capacity(
    concurrency: Annotated[int, typer.Option(min=1, help="Streams in flight.")] = 256,
    seconds: Annotated[float, typer.Option(min=1.0, help="How long to stream.")] = 20.0,
    url: Annotated[
        str | None,
        typer.Option(help="Measure against this running server instead of a simulated one."),
    ] = None,
    output_len: Annotated[int, typer.Option(min=1, help="Output tokens per request.")] = 512,
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """How fast this client streams: token rate and CPU time per 1000 tokens."""
    from autotune.bench import run_client_capacity

    if url is not None:
        url = check_url(url)
    _finite(seconds=seconds)
    result = run_client_capacity(concurrency, seconds, url=url, output_len=output_len)
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
        return
    typer.echo(f"server:                     {result.server_command or result.url}")
    typer.echo(f"concurrency:                {result.concurrency}")
    typer.echo(f"duration (s):               {result.duration_s:.2f}")
    typer.echo(
        f"requests:                   {result.requests_completed} completed, "
        f"{result.requests_cut} cut by the time limit, {result.requests_failed} failed, "
        f"{result.requests_unsent} not sent"
    )
    typer.echo(f"streamed tokens:            {result.streamed_tokens}")
    typer.echo(f"token rate (tok/s):         {result.token_rate:.0f}")
    typer.echo(f"chunk rate (chunks/s):      {result.chunk_rate:.0f}")
    typer.echo(f"client CPU (s):             {result.cpu_s:.2f}")
    typer.echo(f"client CPU per 1k tokens:   {result.cpu_ms_per_1k_tokens:.2f} ms")
    typer.echo(f"client CPU share (cores):   {result.cpu_share:.2f}")
    if result.client_bound:
        typer.echo("note: the client used most of a core: the token rate is the client's ceiling")


@app.command("search")
def search(
    space: Annotated[str, typer.Option("--space", help="The search space file (YAML).")],
    profile: Annotated[
        str | None,
        typer.Option("--profile", help="Simulator profile name or file (default: the space's)."),
    ] = None,
    samplers: Annotated[
        str,
        typer.Option(
            "--samplers",
            help="Comma-separated: default, gp, tpe, random, grid, sglang-auto, twin; "
            "ablations of default: no-informed, no-learning, no-refusal.",
        ),
    ] = "default,gp,tpe,random,grid,sglang-auto",
    twin_errors: Annotated[
        str | None,
        typer.Option(
            "--twin-errors",
            help="What the twin strategy's prior is wrong by, GROUP=FACTOR,... (default "
            "bandwidth=0.85,acceptance=0.9,allreduce=1.5; none: no errors).",
        ),
    ] = None,
    enqueued: Annotated[
        str,
        typer.Option(
            "--enqueued",
            help="with: run the space's own configurations first; without: leave them out; "
            "both: each strategy both ways, in one table (the baseline always runs).",
        ),
    ] = "with",
    no_enqueued: Annotated[
        bool, typer.Option("--no-enqueued", help="The same as --enqueued without.")
    ] = False,
    seeds: Annotated[int, typer.Option("--seeds", min=1, help="Seeds per sampler.")] = 10,
    budget: Annotated[int, typer.Option("--budget", min=1, help="Trials per study.")] = 40,
    noise: Annotated[
        float, typer.Option("--noise", min=0.0, help="Relative measurement noise.")
    ] = 0.02,
    out: Annotated[
        Path, typer.Option("--out", help="Folder for the table, JSON and figure.")
    ] = Path("studies/search-bench"),
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            min=1,
            help="Worker processes for the optimum and the studies (one core each).",
        ),
    ] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Compare samplers on whole simulated studies: trials and GPU hours to 98% of the optimum.

    Each study is the loop of `autotune study start` (its sampler choice, first trials,
    refusals and lessons) with the simulator's model in place of the server, in memory.
    """
    import sys

    from autotune.cli._twin_study import parse_errors
    from autotune.searchbench import PLANS, format_table, run_search_benchmark, write_outputs
    from autotune.space import load_space
    from autotune.study import choose_sampler

    modes = {"with": (True,), "without": (False,), "both": (True, False)}
    if enqueued not in modes:
        raise ConfigError(
            f"unknown value {enqueued!r}", source="--enqueued", hint="choose with, without or both"
        )
    chosen = [s.strip() for s in samplers.split(",") if s.strip()]
    if any(name in PLANS and PLANS[name].sampler is None for name in chosen):
        # the tuner's own sampler: without PyTorch its studies are TPE's, and the table says so
        fallback = choose_sampler("auto", conditional=load_space(space).conditional).note
        if fallback is not None:
            sys.stderr.write(f"bench search: the tuner's studies: {fallback}\n")

    def note(strategy: str, seed: int) -> None:
        if sys.stderr.isatty():
            sys.stderr.write(f"\r{strategy} seed {seed}   ")
            sys.stderr.flush()

    result = run_search_benchmark(
        space,
        profile=profile,
        strategies=chosen,
        seeds=seeds,
        budget=budget,
        noise=noise,
        on_study=note,
        jobs=jobs,
        twin_errors=parse_errors(twin_errors),
        enqueued=(False,) if no_enqueued else modes[enqueued],
    )
    paths = write_outputs(result, out)
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        typer.echo(format_table(result))
        typer.echo("written: " + ", ".join(str(p) for p in paths))


def check_url(url: str, *, option: str = "--url") -> str:
    """``url`` if it names an HTTP server by host and a valid port (the scheme may be left out).

    Raises:
        ConfigError: naming the option, what is wrong and an example.
    """
    from urllib.parse import urlsplit

    hint = "e.g. --url http://127.0.0.1:30000"
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as e:
        raise ConfigError(f"{url!r} is not a usable URL: {e}", source=option, hint=hint) from None
    if parts.scheme not in ("http", "https"):
        raise ConfigError(
            f"{url!r} is not an HTTP URL (scheme {parts.scheme!r})", source=option, hint=hint
        )
    if not parts.hostname:
        raise ConfigError(f"{url!r} names no host", source=option, hint=hint)
    if port is not None and port < 1:
        raise ConfigError(
            f"{url!r}: port {port} is out of range (1-65535)", source=option, hint=hint
        )
    if any(c.isspace() or not c.isprintable() for c in text):
        raise ConfigError(f"{url!r} contains spaces or control characters", source=option)
    return url if "://" in url else text


def _finite(**options: float | None) -> None:
    for name, value in options.items():
        if value is not None and not math.isfinite(value):
            option = "--" + name.replace("_", "-")
            raise ConfigError(
                f"must be a finite number, got {value!r}",
                source=option,
                hint="leave the option out for its default",
            )


def _workload(path: Path | None, **overrides: Any) -> WorkloadSpec:
    from autotune.bench import WorkloadSpec
    from autotune.space._schema import check_workload

    data: dict[str, Any] = {}
    base_dir: Path | None = None
    if path is not None:
        data = _read_yaml(path)
        base_dir = path.resolve().parent
    for key, value in overrides.items():
        if value is not None:
            data[key] = value
    source = str(path) if path is not None else "command line"
    spec = WorkloadSpec.from_mapping(data, source=source, base_dir=base_dir)
    check_workload(spec, source=source, location="workload")
    return spec


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    from autotune._document import MAX_TEXT_CHARS, safe_data

    try:
        with path.open(encoding="utf-8") as f:
            text = f.read(MAX_TEXT_CHARS + 1)  # safe_data refuses a longer text
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ConfigError(f"cannot read the workload file: {e}", source=path) from e
    try:
        data = safe_data(text, source=str(path))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"not valid YAML: {problem}", source=path, location=where) from e
    if isinstance(data, dict) and isinstance(data.get("workload"), dict):
        data = data["workload"]
    if not isinstance(data, dict):
        raise ConfigError(
            "a workload file must be a YAML mapping",
            source=path,
            hint="e.g. 'api: generate', 'concurrency: 16', 'input_len: 512' on separate lines",
        )
    return dict(data)


def _print_table(measurement: Measurement, spec: WorkloadSpec) -> None:
    from rich.console import Console
    from rich.table import Table

    results = measurement.results
    first = results[0]
    rate = f"{spec.request_rate:g} req/s" if spec.request_rate else "closed loop"
    table = Table(
        title=f"Serving benchmark: {first.url}",
        title_justify="left",
        caption=f"api {spec.api}, concurrency {spec.concurrency}, {rate}",
        caption_justify="left",
    )
    table.add_column("metric")
    if len(results) > 1:
        for i in range(len(results)):
            table.add_column(f"run {i + 1}", justify="right")
        table.add_column("median", justify="right")
        table.add_column("MAD", justify="right")
    else:
        table.add_column("value", justify="right")
    for label, name, fmt in _all_rows():
        cells = [_cell(getattr(r, name), fmt) for r in results]
        if len(results) > 1:
            cells += [
                _cell(measurement.medians.get(name), fmt),
                _cell(measurement.mads.get(name), fmt),
            ]
        table.add_row(label, *cells)
    console = Console()
    console.print(table)
    sources = ", ".join(measurement.acceptance_sources)
    console.print(f"acceptance source: {sources}")
    for i, result in enumerate(results, start=1):
        if result.failed:
            reasons = ", ".join(f"{n} {reason}" for reason, n in result.errors.items())
            prefix = f"run {i}: " if len(results) > 1 else ""
            console.print(f"{prefix}failed requests: {reasons}; first: {result.error_examples[0]}")
    if measurement.noisy:
        spread = measurement.relative_spread("output_tok_s") or 0.0
        console.print(
            f"warning: noisy measurement: output_tok_s spread (MAD/median) {spread:.1%} is above "
            f"{measurement.noise_threshold:.0%}; use more prompts or repeats"
        )


def _cell(value: float | None, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, fmt)


def _all_rows() -> list[tuple[str, str, str]]:
    rows = list(_ROWS)
    for label, family in _LATENCY_ROWS:
        for stat in ("mean", "median", "p90", "p99"):
            rows.append((f"{label} {stat} (ms)", f"{family}_{stat}_ms", ".2f"))
    return rows
