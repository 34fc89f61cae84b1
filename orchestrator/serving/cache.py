"""A seed starts from an empty prompt cache: the reset the runner calls at each seed's start.

Driven by the stack file's `prompt_cache:` section (policy `clear_per_seed`, `off` or `unmanaged`), so nothing
here knows a stack by name. HTTP errors and transport failures are returned in the record, never raised.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from orchestrator.serving.stackspec import CacheStep, StackSpec

_BODY_CHARS = 300  # how much of an unexpected answer the record keeps
_POLL_S = 0.25


def reset_prompt_cache(
    client: httpx.Client, base_url: str, spec: StackSpec, *, served_name: str = ""
) -> dict[str, Any]:
    """Empty the server's prompt cache as the stack's policy says; return what was done.

    The record: policy, method (a short description of the requests, or "none"), http_status (of the last
    request; None when none was sent or it never answered), ok (every request answered as expected), cleared
    (the cache is known to be empty now: True after a successful clear and for policy `off`; False for
    `unmanaged` and after a failure), elapsed_s, steps (one entry per request) and error (when not ok).
    `served_name` fills `{served_name}` in paths and bodies (Ollama unloads a model by name).
    """
    policy = spec.prompt_cache.policy
    record: dict[str, Any] = {
        "policy": policy,
        "method": "none",
        "http_status": None,
        "ok": True,
        "cleared": policy == "off",
        "elapsed_s": 0.0,
        "steps": [],
    }
    if policy != "clear_per_seed":
        record["note"] = spec.prompt_cache.note or (
            "prompt caching disabled at launch" if policy == "off" else "the stack cannot clear its prompt cache"
        )
        return record
    start = time.monotonic()
    base = base_url.rstrip("/")
    record["method"] = "; ".join(f"{step.method} {step.path}" for step in spec.prompt_cache.clear)
    values = {"served_name": served_name}
    if not served_name and any(_needs_name(step) for step in spec.prompt_cache.clear):
        record.update(ok=False, cleared=False, error="this stack's reset names the model: pass served_name")
        return record
    for step in spec.prompt_cache.clear:
        error = _run_step(client, base, step, values, record["steps"])
        if error:
            record["ok"] = False
            record["error"] = error
            break
    answered = [s["http_status"] for s in record["steps"] if s.get("http_status") is not None]
    record["http_status"] = answered[-1] if answered else None
    record["cleared"] = record["ok"]
    record["elapsed_s"] = round(time.monotonic() - start, 4)
    return record


def _run_step(
    client: httpx.Client, base: str, step: CacheStep, values: dict[str, str], log: list[dict[str, Any]]
) -> str | None:
    """Run one step (once per slot when asked); append to `log`; return an error text or None."""
    if step.for_each_slot:
        listing = _request(client, "GET", base + step.for_each_slot, None, step.timeout_s)
        log.append({"method": "GET", "path": step.for_each_slot, **_summary(listing)})
        if isinstance(listing, Exception) or listing.status_code != 200:
            return f"could not list slots at {step.for_each_slot}: {_describe(listing)}"
        ids = _slot_ids(listing)
        if ids is None:
            return f"{step.for_each_slot} did not answer a JSON list of objects with an id"
        targets = [{**values, "slot": str(slot_id)} for slot_id in ids]
    else:
        targets = [values]
    for target in targets:
        path = _fill(step.path, target)
        body = _fill_json(step.body, target) if step.body is not None else None
        reply = _request(client, step.method, base + path, body, step.timeout_s)
        log.append({"method": step.method, "path": path, **_summary(reply)})
        if isinstance(reply, Exception) or reply.status_code not in step.ok_statuses:
            return f"{step.method} {path}: {_describe(reply)}"
        if step.ok_json and not _holds(reply, step.ok_json):
            return f"{step.method} {path}: answer lacks {step.ok_json}: {_describe(reply)}"
    if step.until_absent:
        return _wait_absent(client, base, step, values, log)
    return None


def _wait_absent(
    client: httpx.Client, base: str, step: CacheStep, values: dict[str, str], log: list[dict[str, Any]]
) -> str | None:
    assert step.until_absent is not None
    needle = values.get("served_name", "")
    deadline = time.monotonic() + step.timeout_s
    polls = 0
    while True:
        reply = _request(client, "GET", base + step.until_absent, None, step.timeout_s)
        polls += 1
        if not isinstance(reply, Exception) and reply.status_code == 200 and needle not in reply.text:
            log.append({"method": "GET", "path": step.until_absent, "polls": polls, **_summary(reply)})
            return None
        if time.monotonic() >= deadline:
            log.append({"method": "GET", "path": step.until_absent, "polls": polls, **_summary(reply)})
            return f"{step.until_absent} still lists {needle!r} after {step.timeout_s:g}s: {_describe(reply)}"
        time.sleep(_POLL_S)


def _needs_name(step: CacheStep) -> bool:
    return step.until_absent is not None or "{served_name}" in f"{step.path} {step.body}"


def _request(
    client: httpx.Client, method: str, url: str, body: Any, timeout_s: float
) -> httpx.Response | httpx.HTTPError:
    try:
        return client.request(method, url, json=body, timeout=timeout_s)
    except httpx.HTTPError as exc:  # transport failures are data here too
        return exc


def _summary(reply: httpx.Response | httpx.HTTPError) -> dict[str, Any]:
    if isinstance(reply, Exception):
        return {"http_status": None, "error": f"{type(reply).__name__}: {reply}"}
    summary: dict[str, Any] = {"http_status": reply.status_code}
    try:
        body = reply.json()
    except ValueError:
        body = reply.text[:_BODY_CHARS]
    if isinstance(body, dict) and len(str(body)) <= _BODY_CHARS:
        summary["body"] = body
    elif isinstance(body, str) and body:
        summary["body"] = body[:_BODY_CHARS]
    return summary


def _describe(reply: httpx.Response | httpx.HTTPError) -> str:
    if isinstance(reply, Exception):
        return f"{type(reply).__name__}: {reply}"
    return f"HTTP {reply.status_code} {reply.text[:_BODY_CHARS]!r}"


def _holds(reply: httpx.Response, expected: dict[str, Any]) -> bool:
    try:
        body = reply.json()
    except ValueError:
        return False
    return isinstance(body, dict) and all(body.get(key) == value for key, value in expected.items())


def _slot_ids(reply: httpx.Response) -> list[int] | None:
    try:
        body = reply.json()
    except ValueError:
        return None
    if not isinstance(body, list) or not body:
        return None
    ids = [item.get("id") for item in body if isinstance(item, dict)]
    slots = [i for i in ids if isinstance(i, int) and not isinstance(i, bool)]
    return slots if len(slots) == len(body) else None  # every item an object with an integer id, or none


def _fill(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def _fill_json(value: Any, values: dict[str, str]) -> Any:
    if isinstance(value, str):
        return _fill(value, values)
    if isinstance(value, dict):
        return {key: _fill_json(item, values) for key, item in value.items()}
    if isinstance(value, list):
        return [_fill_json(item, values) for item in value]
    return value
