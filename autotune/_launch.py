"""What an engine adapter hands to the process layer: a launch, and the time each stage may take."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from autotune._redact import redact_argv, redact_env, secret_values


@dataclass(frozen=True)
class Timeouts:
    """Seconds allowed for each stage of a trial."""

    startup_s: float = 1800.0  # launch to ready (a crash ends the wait at once)
    benchmark_s: float = 1800.0  # the whole measurement of one trial
    request_s: float = 600.0  # one request, end to end
    stop_s: float = 30.0  # TERM to KILL
    gpu_release_s: float = 120.0  # stop until the GPUs' memory is free again


@dataclass(frozen=True)
class LaunchSpec:
    """One server launch: argv (never a shell string), the environment to add, and the port."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    port: int
    host: str = "127.0.0.1"
    #: Environment names whose values must never be recorded.
    secret_env: frozenset[str] = frozenset()
    #: The server's ``--api-key``, sent by the readiness probe and the benchmark as a bearer
    #: token; never recorded (left out of ``repr`` and :meth:`display`).
    api_key: str | None = field(default=None, repr=False, compare=False)
    #: The leading elements of ``argv`` that are the launch prefix (``docker exec BOX``,
    #: ``srun ...``): the server runs through them and is stopped through them.
    prefix: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __repr__(self) -> str:  # secrets redacted, like display()
        return (
            f"LaunchSpec(argv={tuple(redact_argv(self.argv))!r}, "
            f"env={redact_env(self.env, self.secret_env)!r}, port={self.port!r}, "
            f"host={self.host!r})"
        )

    @property
    def auth_headers(self) -> dict[str, str]:
        """``Authorization: Bearer KEY`` when the server has an API key, else nothing."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def secrets(self) -> set[str]:
        """The secret values of this launch (API key, secret environment, URL passwords), to
        be replaced wherever they are copied (the server's log, before it is kept)."""
        found = secret_values(self.argv, self.env)
        found.update(v for k, v in self.env.items() if k in self.secret_env and v)
        if self.api_key:
            found.add(self.api_key)
        return found

    def display(self, redact: bool = True) -> str:
        """The command line as a user would type it, environment first, secrets redacted."""
        env = redact_env(self.env, self.secret_env) if redact else dict(self.env)
        argv = redact_argv(self.argv) if redact else list(self.argv)
        parts = [f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())]
        parts.extend(shlex.quote(a) for a in argv)
        return " ".join(parts)
