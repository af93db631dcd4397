"""Reading a space file into a :class:`SearchSpace`, checking every key before anything launches.

Every error names the file, the line and the key path (``eagle3.yaml:17
(parameters.speculative_eagle_topk.choices): ...``), says what is allowed, and how to fix it.
The format is documented in ``search_spaces/README.md``.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from autotune._document import MAX_TEXT_CHARS, Document, Section, load_document, suggest
from autotune._errors import ConfigError
from autotune._knobs import SPECULATIVE_NUMBERS, ServerConfig
from autotune._launch import Timeouts
from autotune._workload import WorkloadSpec
from autotune.engines import (
    Engine,
    EngineSpec,
    SimOptions,
    create_engine,
    engine_class,
    engine_kinds,
)
from autotune.space._confirm import parse_confirm
from autotune.space._params import (
    ENGINE_KNOBS,
    ParamSpec,
    coerce_knob,
    parse_param,
    value_problem,
)
from autotune.space._shape import check_shape
from autotune.space._space import MAX_DESCRIPTION_CHARS, SearchSpace, parse_objective

_TOP = (
    "name",
    "description",
    "engine",
    "workload",
    "objective",
    "fixed",
    "parameters",
    "enqueue",
    "confirm",
)
_ENGINE = (
    *("kind", "model_path", "draft_model_path", "tp_size", "host", "port", "python"),
    *("launch_prefix", "extra_args", "env", "sglang_version", "check_paths", "timeouts", "sim"),
    *("expose", "vllm_version"),
)
_TIMEOUTS = ("startup_s", "benchmark_s", "request_s", "stop_s", "gpu_release_s")
_SIM = ("profile", "dialect", "time_scale", "serve_scale", "noise", "seed", "faults")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: The longest study name (it names files: NAME.db, NAME-artifacts/).
MAX_NAME_CHARS = 100
#: A POSIX environment variable name.
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: The largest tensor-parallel size accepted (a node has at most a few dozen GPUs).
MAX_TP_SIZE = 256
#: The longest timeout (seconds): a week.
MAX_TIMEOUT_S = 7 * 24 * 3600.0
#: Bounds of the simulator's time scale (1 runs in real time; tests use 0.005).
SIM_TIME_SCALE = (1e-4, 100.0)
#: Bounds of the simulator's serving clock (1: the box's speed; 0.25: four times faster).
SIM_SERVE_SCALE = (0.05, 100.0)
#: The largest seed (the samplers and the simulator take 32-bit seeds).
MAX_SEED = 2**32 - 1
#: Workload bounds: token lengths, prompts, concurrency, repeats.
MAX_TOKENS = 2_000_000
#: The most prompt tokens one benchmark run may plan (length x prompts).
MAX_TOTAL_TOKENS = 10**9
MAX_PROMPTS = 10**6
MAX_CONCURRENCY = 100_000
MAX_REPEATS = 1000


def load_space(path: str | os.PathLike[str]) -> SearchSpace:
    """Read and validate the space file at ``path``.

    Raises:
        ConfigError: the file cannot be read, or something in it is invalid (file:line (key)).
    """
    source = os.fspath(path)
    file = Path(source).expanduser()
    hint = "the spaces shipped with autotune are in search_spaces/"
    try:
        with _open_regular(file, source=source, hint=hint) as f:
            text = f.read(MAX_TEXT_CHARS + 1)  # load_document refuses a longer text
    except FileNotFoundError as e:
        raise ConfigError("space file does not exist", source=source, hint=hint) from e
    except IsADirectoryError as e:
        raise ConfigError("is a directory, not a space file", source=source, hint=hint) from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"not UTF-8 text ({e.reason})", source=source) from e
    except OSError as e:
        raise ConfigError(f"cannot read the space file: {e.strerror}", source=source) from e
    except ValueError as e:  # a NUL in the path
        raise ConfigError(f"cannot read the space file: {e}", hint=hint) from e
    return parse_space(text, source=source, base_dir=file.resolve().parent)


def special_file(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when it exists and is not a regular file (``a FIFO``, ``a directory``,
    ``a character device``, ...); None for a regular file or a path that does not exist.

    Judged by ``stat`` alone: a FIFO is never opened (reading one waits for a writer forever).
    """
    try:
        mode = Path(path).expanduser().stat().st_mode
    except (OSError, ValueError):
        return None
    return _special_kind(mode)


def _special_kind(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((what for test, what in kinds if test(mode)), "not a regular file")


def _open_regular(file: Path, *, source: str, hint: str) -> TextIO:
    """``file`` opened for reading as UTF-8 text, refused unless it is a regular file.

    Opened without blocking (a FIFO with no writer would otherwise hang the open), then judged
    by what the open descriptor is, so a file swapped for a FIFO in between is still refused.

    Raises:
        ConfigError: a directory, FIFO, device or socket.
        OSError: the file cannot be opened (the caller says so).
    """
    fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        what = _special_kind(os.fstat(fd).st_mode)
        if what == "a directory":
            raise ConfigError("is a directory, not a space file", source=source, hint=hint)
        if what is not None:
            raise ConfigError(
                f"is {what}, not a regular file: a space file is read whole, from disk",
                source=source,
                hint="give the path of the space file (YAML) itself",
            )
        os.set_blocking(fd, True)
        return open(fd, encoding="utf-8")  # the caller's with closes it
    except BaseException:
        os.close(fd)
        raise


def parse_space(
    text: str, *, source: str = "<string>", base_dir: Path | None = None
) -> SearchSpace:
    """Validate a space given as YAML text; relative paths are taken from ``base_dir``."""
    doc = load_document(text, source=source)
    root = doc.root()
    root.check_keys(_TOP)
    base = Path.cwd() if base_dir is None else base_dir
    fixed = _parse_fixed(root.section("fixed"))
    params = _parse_parameters(root, fixed)
    spec = _parse_engine(root.section("engine"), base)
    engine = create_engine(spec)
    check_shape(root, engine, fixed, params)
    workload = _parse_workload(doc, root, base)
    objective = parse_objective(root.section("objective"))
    enqueue = root.section("enqueue")
    enqueue.check_keys(("baseline", "configs"))
    return SearchSpace(
        name=_parse_name(root, source),
        source=source,
        engine=spec,
        workload=workload,
        objective=objective,
        fixed=fixed,
        parameters=params,
        baseline=_parse_baseline(enqueue),
        enqueued=_parse_enqueued(enqueue, fixed, params, engine),
        description=root.string("description", limit=MAX_DESCRIPTION_CHARS),
        confirm=parse_confirm(root),
    )


def _parse_name(root: Section, source: str) -> str:
    if "name" not in root:
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(source).stem).strip("-._")
        return name[:MAX_NAME_CHARS].strip("-._") or "space"
    name = str(root.string("name"))
    if not _NAME.match(name) or len(name) > MAX_NAME_CHARS:
        shown = name if len(name) <= 60 else name[:60] + "..."
        raise root.error(
            f"{shown!r} is not a usable study name",
            "name",
            hint="use letters, digits, '.', '_' and '-', starting with a letter or digit, "
            f"at most {MAX_NAME_CHARS} characters",
        )
    return name


def _parse_fixed(sec: Section) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for knob, raw in sec.data.items():
        _check_knob(sec, knob)
        out[knob] = _value(sec, knob, knob, raw)
    return out


def _parse_parameters(root: Section, fixed: Mapping[str, Any]) -> tuple[ParamSpec, ...]:
    sec = root.section("parameters")
    if not sec.data:
        raise root.error(
            "a space needs at least one parameter to tune",
            "parameters",
            hint="e.g. parameters: {speculative_num_steps: {type: int, low: 1, high: 6}}",
        )
    names = [str(k) for k in sec.data]
    earlier: dict[str, ParamSpec] = {}
    for knob in sec.data:
        _check_knob(sec, knob)
        if knob in fixed:
            raise sec.error(
                f"{knob} is both fixed and tuned",
                knob,
                hint=f"remove {knob} from fixed: or from parameters:",
            )
        earlier[knob] = parse_param(sec.section(knob, required=True), earlier, fixed, names)
    return tuple(earlier.values())


#: Environment variables a knob sets: the knob, and how to ask for what the variable would do.
_OWNED_ENV = {
    "NCCL_ALGO": ("allreduce", "use allreduce: nccl_tree or nccl_ring"),
    "SGLANG_ENABLE_SPEC_V2": ("spec_v2", "use spec_v2: true or false (fixed or tuned)"),
}


def _check_knob(sec: Section, knob: Any) -> None:
    if knob in ENGINE_KNOBS:
        raise sec.error(
            f"{knob} is set by the engine section", knob, hint=f"set engine.{knob} instead"
        )
    knobs = [k for k in ServerConfig.knob_names() if k not in ENGINE_KNOBS]
    if knob not in knobs:
        raise sec.error(f"unknown knob {knob!r}", knob, hint=suggest(str(knob), knobs))


def _value(sec: Section, key: Any, knob: str, raw: Any) -> Any:
    problem = value_problem(raw)
    if problem is not None:
        raise sec.error(problem[0], key, hint=problem[1])
    try:
        return coerce_knob(knob, raw)
    except ConfigError as e:
        raise sec.error(e.message, key, hint=e.hint) from None


def _parse_engine(sec: Section, base: Path) -> EngineSpec:
    sec.check_keys(_ENGINE)
    kind = sec.get("kind", "sim")
    if kind not in engine_kinds():
        raise sec.error(
            f"unknown engine kind {kind!r}", "kind", hint="allowed: " + ", ".join(engine_kinds())
        )
    adapter = engine_class(kind)
    prefix = sec.strings("launch_prefix")
    check = sec.boolean("check_paths", True)
    model = sec.string("model_path", adapter.default_model_path)
    if model is None:
        raise sec.error("missing key 'model_path'", hint="the directory or hub id of the model")
    draft = sec.string("draft_model_path")
    python = sec.string("python")
    env = sec.section("env")
    env_out: dict[str, str] = {}
    for key, raw in env.data.items():
        if not isinstance(key, str) or isinstance(raw, (bool, list, dict)) or raw is None:
            raise env.error(
                f"must be NAME: text, got {_excerpt(key)}: {_excerpt(raw)}",
                key,
                hint="quote the value",
            )
        if not _ENV_NAME.match(key):
            raise env.error(
                f"{_excerpt(key)} is not a usable environment variable name",
                key,
                hint="use letters, digits and '_', not starting with a digit (no '=', no NUL)",
            )
        env.checked_text(str(raw), key)
        if key in _OWNED_ENV:
            knob, hint = _OWNED_ENV[key]
            raise env.error(f"{key} is set by the {knob} knob", key, hint=hint)
        env_out[key] = str(raw)
    extra = sec.strings("extra_args")
    _check_extra_args(sec, extra, adapter)
    host, expose = _parse_host(sec)
    version = sec.string("sglang_version")
    tp_size = sec.integer("tp_size", 1, minimum=1, maximum=MAX_TP_SIZE)
    spec = EngineSpec(
        kind=kind,
        model_path=model,
        draft_model_path=draft,
        tp_size=tp_size,
        host=host,
        expose=expose,
        port=sec.integer("port", 30000, minimum=1, maximum=65535),
        python=python,
        launch_prefix=prefix,
        extra_args=extra,
        env=env_out,
        sglang_version=version,
        vllm_version=sec.string("vllm_version"),
        check_paths=check,
        timeouts=_parse_timeouts(sec.section("timeouts")),
        sim=_parse_sim(sec.section("sim")),
    )
    return adapter.read_section(sec, spec, base=base)


def _check_extra_args(sec: Section, extra: tuple[str, ...], adapter: type[Engine]) -> None:
    """Refuse an extra argument that sets what the tuner sets (the engine knows its flags)."""
    for i, arg in enumerate(extra):
        found = adapter.owned_flag(arg)
        if found is None:
            continue
        flag, owner = found
        name = arg.split("=", 1)[0]
        shown = name if name == flag else f"{name} (argparse reads it as {flag})"
        where = "under fixed: or parameters:" if "." not in owner else "in the space file"
        raise sec.doc.error(
            f"extra_args sets {shown}, which autotune sets from {owner}",
            (*sec.path, "extra_args", i),
            hint=f"set {owner} {where} instead",
        )


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``."""
    import ipaddress

    if host.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _parse_host(sec: Section) -> tuple[str, bool]:
    """``engine.host`` and ``engine.expose``: a loopback address unless exposing is asked for.

    A server listening elsewhere is reachable from other machines (SGLang has no
    authentication unless ``--api-key`` is given), so ``0.0.0.0``, a LAN address or a host name
    needs ``engine.expose: true``, and then a warning is printed each time the space is read.
    """
    host = sec.string("host", "127.0.0.1")
    expose = sec.boolean("expose", False)
    if is_loopback(host):
        return host, expose
    if not expose:
        raise sec.error(
            f"host {host!r} is not a loopback address: the server would be reachable from "
            "other machines",
            "host",
            hint="keep host: 127.0.0.1, or add expose: true to the engine section to listen "
            "on it on purpose",
        )
    import sys

    where = f"{sec.doc.source}:{sec.doc.where((*sec.path, 'host'))}"
    sys.stderr.write(
        f"autotune: warning: {where}: the server will listen on {host} (engine.expose: true), "
        "reachable from other machines\n"
    )
    return host, expose


def _parse_timeouts(sec: Section) -> Timeouts:
    sec.check_keys(_TIMEOUTS)
    defaults = Timeouts()
    return Timeouts(
        **{
            k: sec.number(k, getattr(defaults, k), positive=True, maximum=MAX_TIMEOUT_S)
            for k in _TIMEOUTS
        }
    )


def _parse_sim(sec: Section) -> SimOptions:
    """``engine.sim``, read for every kind (``--engine sim`` may run any space); the simulated
    engine checks that it can run it (:meth:`SimEngine.read_section`)."""
    sec.check_keys(_SIM)
    d = SimOptions()
    low, high = SIM_TIME_SCALE
    return SimOptions(
        profile=sec.string("profile", d.profile),
        dialect=sec.string("dialect", d.dialect),
        time_scale=sec.number("time_scale", d.time_scale, minimum=low, maximum=high),
        serve_scale=sec.number(
            "serve_scale", d.serve_scale, minimum=SIM_SERVE_SCALE[0], maximum=SIM_SERVE_SCALE[1]
        ),
        noise=sec.number("noise", d.noise, maximum=1.0),
        seed=sec.integer("seed", None, minimum=0, maximum=MAX_SEED),
        faults=sec.strings("faults"),
    )


def _parse_workload(doc: Document, root: Section, base: Path) -> WorkloadSpec:
    raw = root.get("workload")
    if raw is None:
        return WorkloadSpec()
    try:
        spec = WorkloadSpec.from_mapping(raw, source=doc.source, location="workload", base_dir=base)
        check_workload(spec, source=doc.source, location="workload")
    except ConfigError as e:
        raise doc.relocate(e) from None
    return spec


def check_workload(spec: WorkloadSpec, *, source: str, location: str = "workload") -> None:
    """Refuse a workload whose sizes would exhaust memory or never end (bounds above)."""

    def over(key: str, value: float | None, limit: float) -> None:
        if value is not None and value > limit:
            raise ConfigError(
                f"{value:,.0f} is too large: at most {limit:,.0f}",
                source=source,
                location=f"{location}.{key}",
                hint="a benchmark workload this size could not be generated or run",
            )

    for key in ("input_len", "output_len"):
        dist = getattr(spec, key)
        over(f"{key}.mean" if dist.distribution != "fixed" else key, dist.mean, MAX_TOKENS)
        over(f"{key}.max", dist.maximum, MAX_TOKENS)
        over(f"{key}.min", dist.minimum, MAX_TOKENS)
        if not math.isfinite(dist.spread) or dist.spread > 10:
            raise ConfigError(
                f"spread {dist.spread!r} is out of range: at most 10",
                source=source,
                location=f"{location}.{key}.spread",
            )
    over("num_prompts", spec.num_prompts, MAX_PROMPTS)
    planned = (spec.num_prompts + spec.warmup) * (spec.input_len.maximum or spec.input_len.mean)
    if planned > MAX_TOTAL_TOKENS:
        raise ConfigError(
            f"{spec.num_prompts + spec.warmup:,} prompts of {spec.input_len.mean:,} tokens are "
            f"{planned:,} prompt tokens; at most {MAX_TOTAL_TOKENS:,} per run",
            source=source,
            location=f"{location}.num_prompts",
            hint="use fewer prompts or shorter inputs",
        )
    over("warmup", spec.warmup, MAX_PROMPTS)
    over("concurrency", spec.concurrency, MAX_CONCURRENCY)
    over("repeats", getattr(spec, "repeats", None), MAX_REPEATS)
    over("seed", getattr(spec, "seed", None), MAX_SEED)
    for key in ("request_rate", "temperature"):
        value = getattr(spec, key, None)
        if value is not None and not math.isfinite(value):
            raise ConfigError(
                f"must be a finite number, got {value!r}",
                source=source,
                location=f"{location}.{key}",
            )
    over("temperature", getattr(spec, "temperature", None), 100)


def _parse_baseline(sec: Section) -> dict[str, Any] | None:
    raw = sec.get("baseline", True)
    if raw is True or raw is None:
        return {}
    if raw is False:
        return None
    if not isinstance(raw, dict):
        raise sec.error(f"must be true, false or a mapping of knobs, got {raw!r}", "baseline")
    base = sec.section("baseline")
    out: dict[str, Any] = {}
    for knob, value in base.data.items():
        _check_knob(base, knob)
        if knob == "speculative_algorithm" or knob in SPECULATIVE_NUMBERS:
            raise base.error(
                f"the baseline runs without speculative decoding; {knob} cannot be set",
                knob,
                hint="an enqueued config under enqueue.configs runs a speculative configuration",
            )
        out[knob] = _value(base, knob, knob, value)
    return out


def _parse_enqueued(
    sec: Section, fixed: Mapping[str, Any], params: tuple[ParamSpec, ...], engine: Engine
) -> tuple[dict[str, Any], ...]:
    raw = sec.get("configs") or []
    if not isinstance(raw, list):
        raise sec.error("configs must be a list of knob mappings", "configs")
    out = []
    for i, item in enumerate(raw):
        path = (*sec.path, "configs", i)
        if not isinstance(item, dict):
            raise sec.doc.error("an enqueued config must be a mapping of knobs", path)
        out.append(_enqueued(Section(sec.doc, path, item), fixed, params, engine))
    return tuple(out)


def _enqueued(
    c: Section, fixed: Mapping[str, Any], params: tuple[ParamSpec, ...], engine: Engine
) -> dict[str, Any]:
    tuned = {p.name: p for p in params}
    for knob, raw in c.data.items():
        if knob in fixed:
            if _value(c, knob, str(knob), raw) != fixed[knob]:
                raise c.error(
                    f"{knob} is fixed at {fixed[knob]!r} in this space",
                    knob,
                    hint=f"drop {knob} here",
                )
        elif knob not in tuned:
            raise c.error(
                f"{knob!r} is not a parameter of this space", knob, hint=suggest(str(knob), tuned)
            )
    values: dict[str, Any] = {}
    for p in params:
        if not p.active(values):
            if p.name in c:
                raise c.error(
                    f"{p.name} does not apply to this config: {p.name} is {p.describe()}",
                    p.name,
                    hint=f"drop {p.name} from this config",
                )
            continue
        if p.name not in c:
            raise c.error(f"missing parameter {p.name}", hint=f"add {p.name} ({p.describe()})")
        value = _value(c, p.name, p.name, c.get(p.name))
        if not p.contains(value):
            raise c.error(
                f"{p.name}={c.get(p.name)!r} is outside the space",
                p.name,
                hint=f"{p.name} is {p.describe()}",
            )
        values[p.name] = value
    config = ServerConfig.from_params({**fixed, **values, "tp_size": engine.spec.tp_size})
    refusal = engine.check_rules(config)
    if refusal is not None:
        raise c.error(
            f"SGLang would not run this config as written: {refusal.reason}",
            refusal.knob,
            hint="change the config to one SGLang runs as given, or drop it",
        )
    return values


def _excerpt(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
