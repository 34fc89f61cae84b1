"""The product channel's MCP error, importable without the MCP SDK (the `mcp` extra): the CLI and the suite
loader catch it whether the SDK is installed or not, and runner/suites/mcpclient.py, the one module that imports the
SDK, raises it, also when the SDK is missing (`MISSING_SDK`)."""

from __future__ import annotations

MISSING_SDK = (
    "the MCP SDK is not installed (the product channel takes a suite's tools from an MCP server with it): "
    "pip install -e '.[mcp]'"
)


class McpError(RuntimeError):
    """The MCP server could not be started, reached, or answered in time (never a tool's own error), or the MCP
    SDK is not installed."""
