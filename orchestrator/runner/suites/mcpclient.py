"""A synchronous, thread-safe client for the project's MCP tool servers.

The MCP SDK is asynchronous; the runner is not. A background thread owns an asyncio event loop, and one task on
it holds the transport and the `ClientSession` open for the client's life (anyio scopes must be entered and
left by the same task). `call` and `list_tools` hand coroutines to that loop from any thread and wait for them.

The server process is spawned here, not by the SDK's `stdio_client`, because that one hides the process: we
need its PID to stop it and to prove it stopped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from datetime import timedelta
from importlib.metadata import version
from pathlib import Path
from typing import IO, Any, Literal, TypeVar

from pydantic import ValidationError

from orchestrator.runner.suites.mcperror import MISSING_SDK, McpError
from orchestrator.serving.handle import free_port

try:  # the `mcp` extra: without it, importing this module is the one clear McpError the CLI prints
    import anyio
    from anyio.abc import Process
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from mcp import ClientSession
    from mcp import types as mcp_types
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.message import SessionMessage
except ImportError as exc:
    raise McpError(f"{MISSING_SDK} ({exc})") from exc

MCP_SERVERS = {"formation": "orchestrator.runner.suites.mcpformation"}
Transport = Literal["stdio", "http"]
LOOPBACK = "127.0.0.1"  # where the HTTP transport binds and is dialled: loopback only
STOP_GRACE_S = 3.0  # per step of the stop sequence: stdin closed, SIGTERM, SIGKILL
T = TypeVar("T")
ReadStream = MemoryObjectReceiveStream[SessionMessage | Exception]
WriteStream = MemoryObjectSendStream[SessionMessage]


__all__ = ["LOOPBACK", "MCP_SERVERS", "McpError", "McpToolServer", "list_server_tools"]


class McpToolServer:
    """One MCP server process and the session to it; start() it, call tools from any thread, close() it."""

    def __init__(
        self,
        server: str,
        transport: Transport,
        *,
        log_path: Path | None = None,
        call_timeout_s: float = 30.0,
        start_timeout_s: float = 30.0,
    ) -> None:
        if server not in MCP_SERVERS:
            raise McpError(f"unknown MCP server {server!r}; known: {sorted(MCP_SERVERS)}")
        if transport not in ("stdio", "http"):
            raise McpError(f"MCP server {server}: unknown transport {transport!r} (stdio or http)")
        self.server, self.transport = server, transport
        self.log_path, self.call_timeout_s, self.start_timeout_s = log_path, call_timeout_s, start_timeout_s
        self.url: str | None = None
        self.pid: int | None = None
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._main: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._tearing_down = False
        self._session: ClientSession | None = None
        self._process: Process | None = None
        self._stderr: IO[bytes] | None = None
        self._output_schemas: dict[str, dict[str, Any] | None] = {}

    def __repr__(self) -> str:
        return f"McpToolServer({self.server!r}, {self.transport!r}, pid={self.pid})"

    @property
    def label(self) -> str:
        return f"MCP server {self.server} ({self.transport}{', pid ' + str(self.pid) if self.pid else ''})"

    def __enter__(self) -> McpToolServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- life cycle ---------------------------------------------------------------------------------------------

    def start(self) -> McpToolServer:
        """Spawn the server, connect, initialize; on any failure nothing is left running."""
        with self._lock:
            if self._thread is not None:
                raise McpError(f"{self.label}: already started")
            self._stop, self._tearing_down, self._main = asyncio.Event(), False, None
            # Server stderr, read back into error messages. O_APPEND: its writes land at the end even after we
            # seek back to read the tail. It lives until close(), hence no `with`.
            self._stderr = tempfile.TemporaryFile(mode="a+b")  # noqa: SIM115
            self._loop = asyncio.new_event_loop()
            ready: concurrent.futures.Future[None] = concurrent.futures.Future()
            self._thread = threading.Thread(target=self._run_loop, args=(ready,), name=f"mcp-{self.server}")
            self._thread.start()
        try:
            ready.result(timeout=self.start_timeout_s)
            self.list_tools()  # also caches output schemas, which `call` needs to unwrap results
        except BaseException as error:
            if isinstance(error, McpError):
                message = str(error)
            elif isinstance(error, TimeoutError):
                message = self._with_stderr(f"{self.label} did not become ready within {self.start_timeout_s:g} s")
            else:
                message = self._with_stderr(f"{self.label} failed to start: {_innermost(error)!r}")
            self.close()
            raise McpError(message) from error
        return self

    def close(self) -> None:
        """Close the session and stop the process this client started. Safe to call twice."""
        with self._lock:
            thread, loop, self._thread = self._thread, self._loop, None
            if thread is None or loop is None:
                return
            with contextlib.suppress(RuntimeError):  # the loop may already have finished on its own
                loop.call_soon_threadsafe(self._shut_down)
            thread.join(timeout=4 * STOP_GRACE_S + 5)
            self._kill_leftover()
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None

    def _shut_down(self) -> None:
        """On the loop: an open session ends gracefully; a start still in progress is cancelled. Never once
        the teardown runs: a cancel there would cut the wait for the process short (asyncio's cancel passes
        anyio's shield), and the loop would close before it learns the exit status."""
        self._stop.set()
        if self._session is None and not self._tearing_down and self._main is not None:
            self._main.cancel()

    def _run_loop(self, ready: concurrent.futures.Future[None]) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            self._main = loop.create_task(self._hold_session(ready))
            loop.run_until_complete(self._main)
        except BaseException as error:  # reported through `ready` when it still matters
            if not ready.done():
                ready.set_exception(error)
        finally:
            leftovers = asyncio.all_tasks(loop)
            for task in leftovers:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _hold_session(self, ready: concurrent.futures.Future[None]) -> None:
        """Spawn, connect and initialize, then keep the session open until close() sets the stop event."""
        process = await self._spawn()
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._connect(process))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                self._session = session
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as error:
            if not ready.done():
                ready.set_exception(error)
            raise
        finally:
            self._session, self._tearing_down = None, True
            await _stop_process(process)

    async def _spawn(self) -> Process:
        command = [sys.executable, "-m", MCP_SERVERS[self.server], "--transport", self.transport]
        if self.transport == "http":
            port = free_port()
            command += ["--port", str(port)]
            self.url = f"http://{LOOPBACK}:{port}/mcp"
        if self.log_path is not None:
            command += ["--log", str(self.log_path)]
        piped = self.transport == "stdio"
        process = await anyio.open_process(
            command,
            stdin=subprocess.PIPE if piped else subprocess.DEVNULL,
            stdout=subprocess.PIPE if piped else subprocess.DEVNULL,
            stderr=self._stderr,
        )
        self._process, self.pid = process, process.pid
        return process

    @contextlib.asynccontextmanager
    async def _connect(self, process: Process) -> AsyncIterator[tuple[ReadStream, WriteStream]]:
        if self.transport == "stdio":
            async with _stdio_streams(process) as streams:
                yield streams
            return
        assert self.url is not None
        await _wait_for_port(process, self.url)
        async with streamable_http_client(self.url) as (read, write, _session_id):
            yield read, write

    def _kill_leftover(self) -> None:
        """Last resort when the loop could not stop the process: kill it by PID and reap it."""
        process = self._process
        if process is None or process.returncode is not None or not _pid_exists(process.pid):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(process.pid, 0)

    # -- requests -----------------------------------------------------------------------------------------------

    def list_tools(self) -> list[dict[str, Any]]:
        """The server's tools in OpenAI function-tool format, parameters being each tool's inputSchema."""
        listed = self._submit(lambda session: session.list_tools(), "tools/list")
        self._output_schemas = {tool.name: tool.outputSchema for tool in listed.tools}
        return [
            {
                "type": "function",
                "function": {"name": tool.name, "description": tool.description or "", "parameters": tool.inputSchema},
            }
            for tool in listed.tools
        ]

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[Any, bool]:
        """Call a tool: (result, is_error). A tool's own error is a result; only transport failures raise."""
        timeout = timedelta(seconds=self.call_timeout_s)
        outcome = self._submit(
            lambda session: session.call_tool(name, arguments, read_timeout_seconds=timeout), f"tools/call {name}"
        )
        return self._result_of(name, outcome), bool(outcome.isError)

    def describe(self) -> dict[str, Any]:
        """What a run records about the tool server: which, how reached, its process, the SDK version."""
        return {
            "server": self.server,
            "transport": self.transport,
            "pid": self.pid,
            "url": self.url,
            "sdk_version": version("mcp"),
        }

    def _result_of(self, name: str, outcome: mcp_types.CallToolResult) -> Any:
        structured = outcome.structuredContent
        if structured is not None:
            wrapped = _wraps_result(name, self._output_schemas.get(name)) and set(structured) == {"result"}
            return structured["result"] if wrapped else structured
        texts = [block.text for block in outcome.content if isinstance(block, mcp_types.TextContent)]
        text = "\n".join(texts)
        try:
            return json.loads(text)
        except ValueError:
            return text

    def _submit(self, request: Callable[[ClientSession], Coroutine[Any, Any, T]], what: str) -> T:
        """Run `request(session)` on the loop thread and wait for it, turning every failure into McpError."""
        loop, session = self._loop, self._session
        if loop is None or session is None or loop.is_closed():
            raise McpError(self._with_stderr(f"{self.label}: {what} failed: not connected (not started or closed)"))
        coroutine = request(session)
        try:
            future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        except RuntimeError as error:  # the loop stopped between the check and the hand-over
            coroutine.close()
            raise McpError(f"{self.label}: {what} failed: the session has ended") from error
        try:
            return future.result(timeout=self.call_timeout_s + 1)
        except TimeoutError as error:
            future.cancel()
            message = f"{self.label}: {what} got no answer within {self.call_timeout_s:g} s"
            raise McpError(self._with_stderr(message)) from error
        except Exception as error:  # the SDK, httpx, anyio, a cancelled future: all mean "no answer"
            raise McpError(self._with_stderr(f"{self.label}: {what} failed: {_innermost(error)!r}")) from error

    def _with_stderr(self, message: str) -> str:
        """Append whether the process still runs and the end of its stderr: the usual reason a call failed."""
        process = self._process
        if process is not None and process.returncode is not None:
            message += f" (server exited with code {process.returncode})"
        tail = _tail(self._stderr)
        return f"{message}\n--- server stderr (last lines) ---\n{tail}" if tail else message


def list_server_tools(server: str, transport: Transport = "stdio") -> list[dict[str, Any]]:
    """Start the server, list its tools in OpenAI function-tool format, stop it."""
    with McpToolServer(server, transport) as client:
        return client.list_tools()


# -- helpers ------------------------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _stdio_streams(process: Process) -> AsyncIterator[tuple[ReadStream, WriteStream]]:
    """Newline-delimited JSON-RPC over the process's stdin/stdout, as the SDK's stdio_client frames it."""
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)

    async def pump_stdout() -> None:
        buffer = b""
        async with to_session:
            with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                async for chunk in stdout:
                    *lines, buffer = (buffer + chunk).split(b"\n")
                    for line in filter(None, lines):
                        try:
                            await to_session.send(SessionMessage(mcp_types.JSONRPCMessage.model_validate_json(line)))
                        except ValidationError as error:
                            await to_session.send(error)

    async def pump_stdin() -> None:
        async with from_session:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_none=True)
                    await stdin.send(data.encode() + b"\n")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(pump_stdout)
        tasks.start_soon(pump_stdin)
        try:
            yield read_stream, write_stream
        finally:
            with contextlib.suppress(Exception):
                await stdin.aclose()  # EOF on stdin is how a stdio server is asked to exit
            tasks.cancel_scope.cancel()
            await read_stream.aclose()
            await write_stream.aclose()


async def _stop_process(process: Process) -> None:
    """Stdin closed (stdio) -> SIGTERM -> SIGKILL, waiting a little after each; shielded from cancellation."""
    with anyio.CancelScope(shield=True):
        if process.stdin is not None:
            with contextlib.suppress(Exception):
                await process.stdin.aclose()
            with anyio.move_on_after(STOP_GRACE_S):
                await process.wait()
        for stop in (process.terminate, process.kill):
            if process.returncode is not None:
                return
            with contextlib.suppress(ProcessLookupError):
                stop()
            with anyio.move_on_after(STOP_GRACE_S):
                await process.wait()


async def _wait_for_port(process: Process, url: str) -> None:
    """Until the HTTP server accepts connections; fails as soon as the process has exited."""
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    while True:
        if process.returncode is not None:
            raise RuntimeError(f"the HTTP server exited with code {process.returncode} before listening on {url}")
        try:
            stream = await anyio.connect_tcp(LOOPBACK, port)
        except OSError:
            await anyio.sleep(0.05)
            continue
        await stream.aclose()
        return


def _wraps_result(name: str, output_schema: dict[str, Any] | None) -> bool:
    """FastMCP wraps non-object returns as {"result": value} in a model it names `<tool>Output`."""
    if not output_schema:
        return False
    return output_schema.get("title") == f"{name}Output" and set(output_schema.get("properties", {})) == {"result"}


def _innermost(error: BaseException) -> BaseException:
    """The first real error inside anyio's nested exception groups, which say nothing by themselves."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _tail(stream: IO[bytes] | None, lines: int = 15) -> str:
    if stream is None or stream.closed:
        return ""
    stream.seek(0)
    text = stream.read()[-8000:].decode(errors="replace")
    return "\n".join(text.strip().splitlines()[-lines:])
