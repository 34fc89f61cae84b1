"""One entry point that labels a turn, streamed or not, with the request semantics it was sent under. Pure.

The runner, `report --reclassify` and `orchestrate classify` all call `label_turn`, so a streamed turn is
re-labelled offline exactly as it was labelled live, and a constraint check is never computed two ways.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.core.classify import AUTO_FORMAT, classify
from orchestrator.core.constraints import RequestSemantics, check_constraints
from orchestrator.core.streamclassify import StreamCut, classify_stream
from orchestrator.core.streams import StreamApi, StreamEvent
from orchestrator.core.types import Classification, RefusalSignature, ToolsMode, TransportError


@dataclass(frozen=True)
class StreamInput:
    """A stream that began (a 2xx with a stream body): its events and how it ended."""

    events: Sequence[StreamEvent]
    api: StreamApi
    cut: StreamCut | None = None


def label_turn(
    *,
    refusals: Sequence[RefusalSignature],
    mode: ToolsMode | str,
    tools: Sequence[Any],
    http_status: int | None,
    body: Any = None,
    transport_error: TransportError | None = None,
    parser_failures: Sequence[RefusalSignature] = (),
    call_format: str = AUTO_FORMAT,
    stream: StreamInput | None = None,
    semantics: RequestSemantics | None = None,
) -> Classification:
    """Exactly one outcome for one exchange; `stream` set when the answer arrived as a stream. A transport
    failure before any stream byte (a first-byte timeout) is labelled as a transport failure."""
    labelled: dict[str, Any] = {"refusals": refusals, "mode": mode, "tools": tools, "parser_failures": parser_failures}
    if stream is not None and transport_error is None:
        verdict = classify_stream(**labelled, events=stream.events, api=stream.api, cut=stream.cut,
                                  call_format=call_format)
    else:
        verdict = classify(
            **labelled, http_status=http_status, body=body, transport_error=transport_error, call_format=call_format
        )
    return check_constraints(verdict, semantics)
