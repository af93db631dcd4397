"""The registry of engine adapters: how a space's ``engine.kind`` finds its adapter."""

from __future__ import annotations

from autotune._errors import ConfigError
from autotune.engines._base import Engine
from autotune.engines._serving import ServerApi
from autotune.engines._spec import EngineSpec
from autotune.engines.sglang import SGLangEngine
from autotune.engines.sim import SimEngine, SimVLLMEngine
from autotune.engines.vllm import VLLMEngine

#: ``engine.kind`` -> the adapter class that serves it.
_ADAPTERS: dict[str, type[Engine]] = {
    "sim": SimEngine,
    "sglang": SGLangEngine,
    "vllm": VLLMEngine,
    "sim-vllm": SimVLLMEngine,
}


def engine_kinds() -> tuple[str, ...]:
    """The registered engine kinds, in the order they were registered."""
    return tuple(_ADAPTERS)


def engine_class(kind: str) -> type[Engine]:
    """The adapter class of engine ``kind``, for what an engine knows before one is built
    (its part of a space file's engine section: :meth:`Engine.read_section` and the like).

    Raises:
        ConfigError: an unknown engine kind.
    """
    adapter = _ADAPTERS.get(kind)
    if adapter is not None:
        return adapter
    raise ConfigError(
        f"unknown engine kind {kind!r}",
        location="engine.kind",
        hint="choose one of: " + ", ".join(engine_kinds()),
    )


def create_engine(spec: EngineSpec) -> Engine:
    """The adapter for ``spec.kind``: :class:`SGLangEngine`, :class:`SimEngine`,
    :class:`VLLMEngine` or :class:`SimVLLMEngine`.

    Raises:
        ConfigError: an unknown engine kind.
    """
    return engine_class(spec.kind)(spec)


def server_api_for(kind: str = "sglang") -> ServerApi:
    """The HTTP API of engine ``kind``'s server (see :meth:`Engine.server_api`).

    For a server known only by its URL (``autotune bench run --url``): the benchmark then reads
    it as SGLang's, whose API the simulated server speaks too.

    Raises:
        ConfigError: an unknown engine kind.
    """
    return create_engine(EngineSpec(kind=kind)).server_api()
