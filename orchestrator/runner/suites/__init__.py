"""Task suites and the tools they offer: dry-run tools in-process or an MCP server."""
