"""The `formation` MCP tool server: company formation tools in a dry run.

Nothing real happens: every result is a pure function of the arguments and the fixed `WORLD` below, so a case
scores the same on every run. The server speaks MCP over stdio or streamable HTTP (loopback only), and can append
one JSON line per tools/call to a log, so tests and users see exactly what the server received.

    python -m orchestrator.runner.suites.mcpformation --transport stdio|http [--port N] [--log PATH]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.types import ContentBlock, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from orchestrator.runner.suites.mcpclient import LOOPBACK

SERVER_NAME = "formation"
DEFAULT_PORT = 8765

EntityType = Literal["ENTITY_TYPE_LLC", "ENTITY_TYPE_C_CORP", "ENTITY_TYPE_S_CORP", "ENTITY_TYPE_NONPROFIT"]

# The fixed world the lookups answer from.
WORLD: dict[str, dict[str, str]] = {
    "ent_7f3a": {"status": "FILED", "name": "Harbor Works LLC", "state": "DE"},
    "ent_19c2": {"status": "PENDING", "name": "Northwind Labs Inc", "state": "DE"},
    "ent_5b80": {"status": "REJECTED", "name": "Acme Robotics LLC", "state": "CA", "reason": "name conflict"},
}
TAKEN_NAMES = frozenset({("acme robotics", "DE"), ("blue harbor", "CA")})


class Agent(BaseModel):
    """The registered agent: a person or a company that receives legal papers."""

    name: Annotated[str, Field(description="Full name of the registered agent.")]


class Address(BaseModel):
    """A US street address."""

    street: Annotated[str, Field(description="Street and number.")]
    city: Annotated[str, Field(description="City.")]
    state: Annotated[str, Field(description="Two-letter US state code, e.g. CA.")]
    zip: Annotated[str, Field(description="Five-digit ZIP code.")]


class Shareholder(BaseModel):
    """One shareholder and how many shares they hold."""

    name: Annotated[str, Field(description="Full name of the shareholder.")]
    shares: Annotated[int, Field(description="Number of shares, a whole number.")]


EntityId = Annotated[str, Field(description="Entity id: ent_ and four hex digits.")]
StateCode = Annotated[str, Field(description="Two-letter US state code, e.g. CA for California.")]
TextInput = Annotated[str, Field(description="The text to process, exactly as given.")]


def form_entity(
    name: Annotated[str, Field(description="Company name as the user gave it.")],
    entity_type: Annotated[EntityType, Field(description="Kind of company to form.")],
    state: StateCode,
) -> dict[str, Any]:
    """Form a new company (dry run). state: two-letter US state code."""
    digest = hashlib.sha256(f"{name}|{entity_type}|{state}".encode()).hexdigest()
    return {"status": "accepted", "dry_run": True, "entity_id": f"ent_{digest[:4]}"}


def register_agent(
    entity_id: EntityId,
    agent: Annotated[Agent, Field(description="The registered agent.")],
    address: Annotated[Address, Field(description="The agent's street address.")],
) -> dict[str, Any]:
    """Register the registered agent of a company (dry run)."""
    return {"status": "registered", "dry_run": True, "entity_id": entity_id}


def add_shareholders(
    entity_id: EntityId,
    shareholders: Annotated[list[Shareholder], Field(description="The shareholders to record.")],
) -> dict[str, Any]:
    """Record shareholders of a company (dry run)."""
    return {"status": "recorded", "dry_run": True, "count": len(shareholders)}


def entity_status(entity_id: EntityId) -> dict[str, Any]:
    """Look up the filing status of a company by its entity id."""
    if entity_id not in WORLD:
        raise ToolError(f"unknown entity_id {entity_id!r}: no company has this id")
    return {"entity_id": entity_id, **WORLD[entity_id]}


def name_available(
    name: Annotated[str, Field(description="Company name to check.")],
    state: StateCode,
) -> dict[str, Any]:
    """Check whether a company name is still available in a US state."""
    taken = (name.strip().casefold(), state.strip().upper()) in TAKEN_NAMES
    return {"name": name, "state": state, "available": not taken}


def md5(input: TextInput) -> dict[str, Any]:
    """MD5 hash of a text, as lowercase hex."""
    return {"result": hashlib.md5(input.encode()).hexdigest()}


def sha256(input: TextInput) -> dict[str, Any]:
    """SHA-256 hash of a text, as lowercase hex."""
    return {"result": hashlib.sha256(input.encode()).hexdigest()}


def base64_encode(input: TextInput) -> dict[str, Any]:
    """Base64 encoding of a text (UTF-8)."""
    return {"result": base64.b64encode(input.encode()).decode()}


TOOLS = (form_entity, register_agent, add_shareholders, entity_status, name_available, md5, sha256, base64_encode)
READ_ONLY = frozenset({"entity_status", "name_available", "md5", "sha256", "base64_encode"})


def explain_invalid(tool: str, error: ValidationError) -> str:
    """A short, model-readable account of bad arguments (pydantic's own text ends in a URL per error)."""
    problems = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "arguments"
        problems.append(f"{where}: {item['msg']} (got {item.get('input')!r})")
    return f"invalid arguments for {tool}: " + "; ".join(problems)


class FormationServer(FastMCP):
    """FastMCP that logs every tools/call it receives and words argument errors briefly."""

    def __init__(self, *, log_path: Path | None, port: int) -> None:
        super().__init__(SERVER_NAME, host=LOOPBACK, port=port, log_level="WARNING")
        self.log_path = log_path
        for tool in TOOLS:
            self.add_tool(tool, annotations=ToolAnnotations(readOnlyHint=tool.__name__ in READ_ONLY))

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Sequence[ContentBlock] | dict[str, Any]:
        try:
            result = await super().call_tool(name, arguments)
        except ToolError as error:
            self.record(name, arguments, is_error=True)
            if isinstance(error.__cause__, ValidationError):
                raise ToolError(explain_invalid(name, error.__cause__)) from error
            raise
        except Exception:
            self.record(name, arguments, is_error=True)
            raise
        self.record(name, arguments, is_error=False)
        return result

    def record(self, tool: str, arguments: dict[str, Any], *, is_error: bool) -> None:
        """Append what arrived, as it arrived (before FastMCP's JSON pre-parsing and validation)."""
        if self.log_path is None:
            return
        line = {"tool": tool, "arguments": arguments, "is_error": is_error, "at": datetime.now(UTC).isoformat()}
        with self.log_path.open("a", encoding="utf-8") as log:
            log.write(json.dumps(line, default=str) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The formation MCP tool server (dry run: nothing is filed).")
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"HTTP port on {LOOPBACK}")
    parser.add_argument("--log", type=Path, default=None, help="append one JSON line per tools/call received")
    options = parser.parse_args(argv)
    server = FormationServer(log_path=options.log, port=options.port)
    server.run("stdio" if options.transport == "stdio" else "streamable-http")


if __name__ == "__main__":
    main()
