"""One readiness loop for every stack and launcher, and what the server says it is.

The loop polls the stack's readiness path until it answers the ready status, and on every poll also
checks that the server is still alive, so a crashed server fails at once with its log tail instead of
at the deadline. Connection refused (vLLM, SGLang while loading) and 503 (llama.cpp, SGLang warming up)
both mean "not yet".
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import httpx

from orchestrator.serving.stackspec import Probe, StackSpec, render_args


class ServerDied(RuntimeError):
    pass


class ReadinessTimeout(RuntimeError):
    pass


class Liveness(Protocol):
    base_url: str

    def alive(self) -> bool: ...

    def logs(self, tail: int = 40) -> str: ...


def wait_ready(
    server: Liveness,
    spec: StackSpec,
    *,
    timeout_s: float,
    poll_s: float = 0.5,
    headers: dict[str, str] | None = None,
) -> float:
    """Block until the server is ready; returns seconds waited. Raises ServerDied or ReadinessTimeout."""
    start = time.monotonic()
    deadline = start + timeout_s
    last = "no answer yet"
    url = server.base_url.rstrip("/") + spec.readiness.path
    with httpx.Client(timeout=httpx.Timeout(5.0), headers=headers) as client:
        while True:
            if not server.alive():
                raise ServerDied(f"server exited while waiting for {url}; log tail:\n{server.logs(40)}")
            try:
                status = client.get(url).status_code
                if status == spec.readiness.ready_status:
                    return time.monotonic() - start
                last = f"HTTP {status}"
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}"
            if time.monotonic() >= deadline:
                raise ReadinessTimeout(
                    f"{url} not ready after {timeout_s:.0f}s (last: {last}); log tail:\n{server.logs(40)}"
                )
            time.sleep(poll_s)


def field_at(data: Any, dotted: str) -> Any:
    """The value at a dotted path in nested JSON objects; None where the path breaks off."""
    for part in [p for p in dotted.split(".") if p]:
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def probe_body(probe: Probe, served_name: str) -> dict[str, Any] | None:
    """The probe's JSON body with {served_name} filled in."""
    if probe.body is None:
        return None
    values = {"served_name": served_name}
    return {k: render_args([v], values)[0] if isinstance(v, str) else v for k, v in probe.body.items()}


def read_probe(client: httpx.Client, base_url: str, probe: Probe, served_name: str) -> Any:
    """GET/POST one info endpoint and return the configured field (None if unavailable)."""
    url = base_url.rstrip("/") + probe.path
    try:
        body = probe_body(probe, served_name)
        reply = client.post(url, json=body) if probe.method == "POST" else client.get(url)
        if reply.status_code != 200:
            return {"http_status": reply.status_code, "body": reply.text[:500]}
        return field_at(reply.json(), probe.field)
    except (httpx.HTTPError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def server_facts(base_url: str, spec: StackSpec, served_name: str, headers: dict[str, str] | None = None) -> dict:
    """What the server says it is: version (from its own endpoint) and capability endpoints."""
    with httpx.Client(timeout=httpx.Timeout(10.0), headers=headers) as client:
        version = read_probe(client, base_url, spec.version, served_name)
        capabilities = {
            f"{probe.path}#{probe.field}": read_probe(client, base_url, probe, served_name)
            for probe in spec.capabilities
        }
    return {
        "stack_version": version if isinstance(version, str) else None,
        "version_raw": version,
        "capabilities": capabilities,
    }
