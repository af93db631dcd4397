"""Workload specifications: what a benchmark sends, as data.

A :class:`WorkloadSpec` is frozen and fully describes a measurement: the request source
(synthetic lengths, a JSONL prompt file, a ShareGPT file), the API used (SGLang's native
``/generate``, ``/v1/completions`` or ``/v1/chat/completions``), concurrency or Poisson arrivals,
warm-up, output lengths, temperature and seed. The same spec drives the benchmark client and the
simulator's own evaluation, so both see the same requests.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune._errors import ConfigError

DISTRIBUTIONS = ("fixed", "uniform", "lognormal")
SOURCES = ("synthetic", "jsonl", "sharegpt")
APIS = ("generate", "completions", "chat")


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution.

    ``fixed``: always ``mean``. ``uniform``: integers in ``[mean*(1-spread), mean*(1+spread)]``.
    ``lognormal``: median ``mean`` and shape ``spread`` (sigma of the log). Clipped to
    ``[minimum, maximum]``.
    """

    mean: int
    distribution: str = "fixed"
    spread: float = 0.0
    minimum: int = 1
    maximum: int | None = None

    def sample(self, rng: random.Random) -> int:
        if self.distribution == "fixed":
            value = float(self.mean)
        elif self.distribution == "uniform":
            low = self.mean * (1.0 - self.spread)
            high = self.mean * (1.0 + self.spread)
            value = rng.uniform(low, high)
        else:
            value = self.mean * math.exp(rng.gauss(0.0, self.spread))
        n = round(value)
        n = max(self.minimum, n)
        if self.maximum is not None:
            n = min(self.maximum, n)
        return n


@dataclass(frozen=True)
class WorkloadSpec:
    """One benchmark workload. See the module docstring."""

    name: str = "default"
    source: str = "synthetic"
    path: str | None = None
    api: str = "generate"
    num_prompts: int = 32
    warmup: int = 1
    concurrency: int = 1
    request_rate: float | None = None
    input_len: LengthDist = LengthDist(512)
    output_len: LengthDist = LengthDist(256)
    ignore_eos: bool = True
    temperature: float = 0.0
    seed: int = 0
    repeats: int = 1

    def sample_lengths(self, n: int | None = None) -> list[tuple[int, int]]:
        """``(input_tokens, output_tokens)`` of the first ``n`` measured requests (synthetic).

        Deterministic under ``seed``; warm-up requests are drawn from a separate stream so that
        changing ``warmup`` does not change the measured requests.
        """
        count = self.num_prompts if n is None else n
        rng = random.Random(f"{self.seed}:lengths")
        return [(self.input_len.sample(rng), self.output_len.sample(rng)) for _ in range(count)]

    def with_changes(self, **changes: Any) -> WorkloadSpec:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_mapping(
        cls,
        data: Mapping[str, Any],
        *,
        source: str | Path | None = None,
        location: str = "workload",
        base_dir: Path | None = None,
    ) -> WorkloadSpec:
        """Parse a workload mapping (from a space or profile file), checking every key.

        Raises:
            ConfigError: naming the file, the key (``workload.input_len.mean``) and what is allowed.
        """
        if not isinstance(data, Mapping):
            raise ConfigError("a workload must be a mapping", source=source, location=location)
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - fields)
        if unknown:
            raise ConfigError(
                f"unknown key {unknown[0]!r}",
                source=source,
                location=f"{location}.{unknown[0]}",
                hint="allowed keys: " + ", ".join(sorted(fields)),
            )
        values: dict[str, Any] = {}
        for key, raw in data.items():
            where = f"{location}.{key}"
            if key in ("input_len", "output_len"):
                values[key] = _parse_length(raw, source, where)
            elif key in ("num_prompts", "concurrency", "repeats"):
                values[key] = _int(raw, source, where, minimum=1)
            elif key in ("warmup", "seed"):
                values[key] = _int(raw, source, where, minimum=0)
            elif key == "request_rate":
                values[key] = None if raw is None else _float(raw, source, where, positive=True)
            elif key == "temperature":
                values[key] = _float(raw, source, where, positive=False)
                if values[key] < 0:
                    raise ConfigError("must be >= 0", source=source, location=where)
            elif key == "ignore_eos":
                if not isinstance(raw, bool):
                    raise ConfigError("must be true or false", source=source, location=where)
                values[key] = raw
            elif key == "source":
                values[key] = _choice(raw, SOURCES, source, where)
            elif key == "api":
                values[key] = _choice(raw, APIS, source, where)
            elif key in ("name", "path"):
                if not isinstance(raw, str) or not raw:
                    raise ConfigError("must be a non-empty string", source=source, location=where)
                values[key] = raw
        spec = cls(**values)
        if spec.source != "synthetic":
            if spec.path is None:
                raise ConfigError(
                    f"source {spec.source!r} needs a path to the prompt file",
                    source=source,
                    location=f"{location}.path",
                )
            path = Path(spec.path).expanduser()
            if not path.is_absolute() and base_dir is not None:
                path = base_dir / path
            if not path.is_file():
                raise ConfigError(
                    f"prompt file {str(path)!r} does not exist",
                    source=source,
                    location=f"{location}.path",
                )
            spec = dataclasses.replace(spec, path=str(path))
        return spec

    def to_mapping(self) -> dict[str, Any]:
        """A plain mapping that :meth:`from_mapping` reads back (for records and artifacts)."""
        return dataclasses.asdict(self)


def _parse_length(raw: Any, source: str | Path | None, where: str) -> LengthDist:
    if isinstance(raw, bool):
        raise ConfigError("must be a token count or a mapping", source=source, location=where)
    if isinstance(raw, int):
        if raw < 1:
            raise ConfigError("must be >= 1", source=source, location=where)
        return LengthDist(raw)
    if not isinstance(raw, Mapping):
        raise ConfigError(
            "must be a token count or a mapping with mean, distribution, spread, min, max",
            source=source,
            location=where,
        )
    allowed = {"mean", "distribution", "spread", "min", "max"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ConfigError(
            f"unknown key {unknown[0]!r}",
            source=source,
            location=f"{where}.{unknown[0]}",
            hint="allowed keys: " + ", ".join(sorted(allowed)),
        )
    if "mean" not in raw:
        raise ConfigError("missing key 'mean'", source=source, location=where)
    mean = _int(raw["mean"], source, f"{where}.mean", minimum=1)
    dist = _choice(raw.get("distribution", "fixed"), DISTRIBUTIONS, source, f"{where}.distribution")
    spread = _float(raw.get("spread", 0.0), source, f"{where}.spread", positive=False)
    if spread < 0 or (dist == "uniform" and spread >= 1):
        raise ConfigError(
            "spread must be >= 0 (and < 1 for uniform)", source=source, location=f"{where}.spread"
        )
    minimum = _int(raw.get("min", 1), source, f"{where}.min", minimum=1)
    maximum = (
        None if raw.get("max") is None else _int(raw["max"], source, f"{where}.max", minimum=1)
    )
    if maximum is not None and maximum < minimum:
        raise ConfigError("max must be >= min", source=source, location=f"{where}.max")
    return LengthDist(mean, dist, spread, minimum, maximum)


def _int(raw: Any, source: str | Path | None, where: str, *, minimum: int) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ConfigError(f"must be an integer, got {raw!r}", source=source, location=where)
    if raw < minimum:
        raise ConfigError(f"must be >= {minimum}, got {raw}", source=source, location=where)
    return raw


def _float(raw: Any, source: str | Path | None, where: str, *, positive: bool) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise ConfigError(f"must be a number, got {raw!r}", source=source, location=where)
    value = float(raw)
    if math.isnan(value) or (positive and value <= 0):
        raise ConfigError(f"must be a positive number, got {raw!r}", source=source, location=where)
    return value


def _choice(raw: Any, allowed: tuple[str, ...], source: str | Path | None, where: str) -> str:
    if raw not in allowed:
        raise ConfigError(
            f"{raw!r} is not allowed; choose one of: {', '.join(allowed)}",
            source=source,
            location=where,
        )
    return str(raw)
