"""The readiness probe sends the server's API key, as SGLang's ``--api-key`` requires."""

from __future__ import annotations

import httpx

from autotune.server._startup import Probe, _probe

PROBES = (Probe("/health_generate"), Probe("/get_model_info", json_object=True, needs_key=True))

KEY = "probe-key-123"


def _server(request: httpx.Request) -> httpx.Response:
    if request.url.path.startswith("/health"):
        return httpx.Response(200)
    if request.headers.get("authorization") != f"Bearer {KEY}":
        return httpx.Response(401, json={"error": "Unauthorized"})
    return httpx.Response(200, json={"model_path": "m"})


def test_probe_sends_the_key() -> None:
    with httpx.Client(transport=httpx.MockTransport(_server)) as client:
        assert _probe(client, "http://127.0.0.1:1", PROBES, 5.0, KEY) is None


def test_probe_without_the_key_says_so() -> None:
    with httpx.Client(transport=httpx.MockTransport(_server)) as client:
        failure = _probe(client, "http://127.0.0.1:1", PROBES, 5.0)
        assert failure == "GET /get_model_info answered 401 (the server wants an API key)"
        wrong = _probe(client, "http://127.0.0.1:1", PROBES, 5.0, "other")
        assert wrong is not None and "the API key was refused" in wrong and "other" not in wrong
