"""Where the product channel's calls go: the suite's own dry-run tools, or its MCP server (dry run too).

Either way a call the server does not offer is not sent (the harness answers it), and whatever the server
answers is kept as it came: a tool error is an answer. A server that cannot be reached did not receive the
call: the execution is `sent: false` with a `tool_server:unreachable` error, and the product loop ends the case
as `tool_server_died` (the stack's side of the run, never scored as the model's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from orchestrator.core.classify import tools_by_name
from orchestrator.core.types import ParsedCall, ToolExecution
from orchestrator.runner.suites.mcperror import McpError
from orchestrator.runner.suites.tasks import Seed, Suite, execute

# The MCP SDK (the `mcp` extra) is imported only where a server is started: runner/suites/mcpclient.py.
if TYPE_CHECKING:
    from orchestrator.runner.suites.mcpclient import McpToolServer

Executor = Callable[[ParsedCall], ToolExecution]
UNREACHABLE = "tool_server:unreachable"


def unreachable(execution: ToolExecution) -> bool:
    """The tool server could not be reached for this call (it never received it)."""
    result = execution.result
    return isinstance(result, dict) and str(result.get("error", "")).startswith(UNREACHABLE)


def local_executor(suite: Suite, seed: Seed) -> Executor:
    """The suite's inline dry-run tools over the seed's data."""

    def run(call: ParsedCall) -> ToolExecution:
        result = execute(suite, seed, call)
        sent = call.name in tools_by_name(suite.tools)
        return ToolExecution(call=call, result=result.result, error=result.error, sent=sent)

    return run


def mcp_executor(server: McpToolServer, suite: Suite) -> Executor:
    """The suite's MCP server: tools/call with the call's arguments; it answers in dry run."""
    offered = tools_by_name(suite.tools)

    def run(call: ParsedCall) -> ToolExecution:
        if call.name not in offered:
            return ToolExecution(call=call, result={"error": f"unknown tool {call.name!r}"}, error=True, sent=False)
        if not isinstance(call.arguments, dict):
            return ToolExecution(call=call, result={"error": "arguments are not an object"}, error=True, sent=False)
        try:
            result, is_error = server.call(call.name, call.arguments)
        except McpError as exc:
            return ToolExecution(call=call, result={"error": f"{UNREACHABLE}: {exc}"}, error=True, sent=False)
        return ToolExecution(call=call, result=result, error=is_error)

    return run
