"""The run's tool servers: one MCP server per suite that takes its tools from one, started once per run, and
where each product call goes (that server, or the suite's own dry-run tools)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.runner.config.matrix import Cell
from orchestrator.runner.suites.tasks import Suite
from orchestrator.runner.suites.toolserver import Executor, local_executor, mcp_executor

if TYPE_CHECKING:  # the MCP SDK (the `mcp` extra) is imported only where a server starts
    from orchestrator.runner.suites.mcpclient import McpToolServer


class ToolServers:
    def __init__(self, suites: dict[str, Suite], run_dir: Path, *, product: bool) -> None:
        self.suites = suites
        self.run_dir = run_dir
        self.product = product  # only a product channel hands calls to a server
        self.servers: dict[str, McpToolServer] = {}  # suite -> its MCP server

    def start(self) -> None:
        """A server that will not start fails the run before any model work (every product call would go
        unanswered)."""
        if not self.product:
            return
        for suite in self.suites.values():
            if suite.mcp is None or suite.suite in self.servers:
                continue
            log = self.run_dir / "tool_calls" / f"{suite.suite}.jsonl"
            log.parent.mkdir(parents=True, exist_ok=True)
            from orchestrator.runner.suites.mcpclient import (
                McpToolServer,  # the `mcp` extra: only where a server starts
            )

            self.servers[suite.suite] = McpToolServer(suite.mcp.server, suite.mcp.transport, log_path=log).start()

    def close(self) -> None:
        for server in self.servers.values():
            server.close()
        self.servers.clear()

    def executor(self, suite: Suite, seed_id: str) -> Executor:
        server = self.servers.get(suite.suite)
        return mcp_executor(server, suite) if server else local_executor(suite, suite.seed(seed_id))

    def record(self, cell: Cell) -> dict[str, Any] | None:
        """The MCP server(s) a product cell's calls went to (server, transport, pid, SDK version)."""
        if cell.channel != "product":
            return None
        servers = {suite: self.servers[suite].describe() for suite, _ in cell.seeds if suite in self.servers}
        return servers or None
