"""The mode axis as data: one `Mode` object per tools mode holds every rule that differs between modes.

- native: only `tools=`; the stack's own tool_calls are the calls; a call written as text (in any call format
  core/textcalls.py knows) is a parse loss, with the calls it holds recovered beside it.
- native+hint: `tools=` plus the tool list and the JSON call format in the system prompt; the stack's calls
  first, a call written as text (in any known format, not only the JSON the prompt asks for) is read by the harness.
- text-tools: no `tools=`; tool list and format in the prompt; calls parsed from the text by the harness.
- raw-template: no chat API at all: the harness renders the model's own chat template (tools passed as the
  template expects), sends the text to the stack's raw completion endpoint and reads the calls with the
  reference recognisers. Against native (stack template + stack parser) and text-tools (no tools in the
  template) it says whether a native failure is the stack's template, its parser, or the model.
- constrained: no `tools=`; decoding constrained (the stack's own knob) to a JSON schema whose tool-name
  field is an enum of the offered tools; the same call repeated ends the seed (weak models loop forever).
Pure: the runner renders the named prompt templates; the classifier reads the parse rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.core.types import ParsePath, ToolsMode

JSON_FORMAT = "json"  # what tool_list.j2 and constrained.j2 ask for: {"name": ..., "arguments": {...}}


@dataclass(frozen=True)
class Mode:
    """Everything that makes one tools mode what it is."""

    name: ToolsMode
    sends_tools: bool  # request shaping: `tools=` in the body
    system_template: str | None  # prompt template rendered into the system message; None = the task's own
    parse_path: ParsePath  # who turns output into calls: the stack ("server") or the harness
    reads_text_calls: bool  # a call written as text counts as a call (else: a parse loss)
    constrained: bool  # decoding constrained to `call_schema(tools)`
    detects_loops: bool  # `loop_repeats` identical calls in a row end the seed
    result_template: str = "tool_result.j2"
    requested_format: str | None = None  # the call format the prompt asks for (a name in textcalls.FORMATS)
    renders_template: bool = False  # the harness renders the model's chat template; raw completion endpoint

    @property
    def hint(self) -> bool:
        """A plain-text tool list and call format reach the model in the prompt."""
        return self.system_template is not None

    @property
    def templates(self) -> tuple[str, ...]:
        """The prompt templates this mode uses; their hash is part of the cell's config."""
        return (*([self.system_template] if self.system_template else []), self.result_template)

    def response_schema(self, tools: list[dict[str, Any]]) -> dict[str, Any] | None:
        return call_schema(tools) if self.constrained else None


MODES: dict[ToolsMode, Mode] = {
    mode.name: mode
    for mode in (
        Mode(ToolsMode.NATIVE, True, None, "server", reads_text_calls=False, constrained=False, detects_loops=False),
        Mode(ToolsMode.NATIVE_HINT, True, "tool_list.j2", "server", True, False, False, requested_format=JSON_FORMAT),
        Mode(ToolsMode.TEXT_TOOLS, False, "tool_list.j2", "harness", True, False, False, requested_format=JSON_FORMAT),
        Mode(ToolsMode.CONSTRAINED, False, "constrained.j2", "harness", True, True, True, requested_format=JSON_FORMAT),
        Mode(ToolsMode.RAW_TEMPLATE, False, None, "harness", True, False, False, renders_template=True),
    )
}


def mode_of(mode: ToolsMode | str) -> Mode:
    return MODES[ToolsMode(mode)]


def call_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The constrained-decoding schema: a tool name from an enum, and an arguments object."""
    names = [tool["function"]["name"] for tool in tools]
    return {
        "type": "object",
        "properties": {"name": {"type": "string", "enum": names}, "arguments": {"type": "object"}},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }
