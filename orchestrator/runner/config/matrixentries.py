"""The entries of a matrix file: stack configs, models and their sources, task suites. Validated on load.

Names become file names (results/<run>/cells/<cell id>.json, the run directory itself), so they are checked,
not repaired: a matrix `name` and a stack `id` are ASCII labels (letters, digits, `_ . -`, starting with a
letter or digit); a model `name` may also hold `: @ + / =` (served names such as `qwen2.5-coder:0.5b`) but no
`..`; each at most `MAX_NAME` characters. Counts are strict integers (`"8"`, `8.9` and `true` are refused,
never coerced) within sane caps; a bootstrap takes 1..`MAX_RESAMPLES` resamples and an rng_seed in
0..`MAX_RNG_SEED` (what every numpy generator accepts).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from orchestrator.core.bfcl import BFCL_SUITE
from orchestrator.core.classify import AUTO_FORMAT, check_call_format
from orchestrator.core.stats import MAX_RESAMPLES, MAX_RNG_SEED, BootstrapSettings
from orchestrator.core.types import ToolsMode
from orchestrator.runner.config.resolve import assets_in
from orchestrator.runner.suites.tasks import Suite, SuiteError
from orchestrator.serving.chatapi import Decoding
from orchestrator.serving.registry import UnknownStackError
from orchestrator.serving.serverconfig import LauncherKind
from orchestrator.serving.stackspec import Host, StackSpec
from orchestrator.serving.streaming import StreamTimeouts

MAX_NAME = 64
MAX_TURN_CAP = 10_000
MAX_COUNT = 1_000_000  # seeds per suite, tokens per answer: far above any real matrix
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@+/=-]*")


def check_name(value: str, pattern: re.Pattern[str] = LABEL, what: str = "a label") -> str:
    """A name that may become (part of) a file name: bounded, plain ASCII, never a path (`/` is slugged)."""
    shown = repr(value[:MAX_NAME]) + ("…" if len(value) > MAX_NAME else "")
    if len(value) > MAX_NAME:
        raise ValueError(f"name {shown} is {len(value)} characters long; at most {MAX_NAME} (it names files)")
    if not pattern.fullmatch(value) or ".." in value:
        allowed = "letters, digits and _ . -" + (" : @ + / =" if pattern is MODEL_NAME else "")
        raise ValueError(f"{what} {shown} may hold only {allowed}, start with a letter or digit, and hold no '..'")
    return value


def no_nul(value: Any) -> Any:
    """Strings passed on to a process (arguments, paths) hold no NUL byte: the OS would refuse them mid-run."""
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, str) and "\x00" in item:
            raise ValueError("holds a NUL byte")
    return value


def strict_count(default: Any, *, ge: int = 1, le: int = MAX_COUNT, description: str | None = None) -> Any:
    """A strict integer field: 8, never "8", 8.9 or true."""
    return Field(default, strict=True, ge=ge, le=le, description=description)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


RESOURCE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]*")
RESERVED_RESOURCES = frozenset({"CPU", "GPU", "memory", "object_store_memory"})  # Ray's own: set through gpus


def check_resources(value: Any) -> Any:
    """Custom Ray resources: named like Ray's node labels, amounts numbers (never `true` or "1") in (0, 10,000];
    Ray's own CPU/GPU are not custom (a stack's GPUs come from `gpus` and its stack file)."""
    if not isinstance(value, dict):
        return value  # the field's own type check names it
    for name, amount in value.items():
        if not isinstance(name, str):
            raise ValueError(f"resource name {name!r}: letters, digits and _ . : / - only")
        if not RESOURCE_NAME.fullmatch(name) or len(name) > MAX_NAME:
            raise ValueError(f"resource name {name[:MAX_NAME]!r}: letters, digits and _ . : / - only")
        if name in RESERVED_RESOURCES:
            raise ValueError(f"resource {name!r} is Ray's own; set GPUs with `gpus` (and host: gpu)")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 < amount <= 10_000:
            raise ValueError(f"resource {name!r}: amount {amount!r} must be a number in (0, 10000]")
        # What Ray's .options() accepts (else it raises mid-run): above 1 whole, below in steps of 0.0001.
        if (amount > 1 and amount != int(amount)) or abs(amount * 10_000 - round(amount * 10_000)) > 1e-6:
            raise ValueError(f"resource {name!r}: amount {amount!r}: above 1 whole numbers, below 1 steps of 0.0001")
    return value


RayResources = Annotated[dict[str, float], BeforeValidator(check_resources)]  # stack and model entries alike


def json_value_problem(value: dict[str, Any]) -> tuple[str, str] | None:
    """(where, why) `value` cannot be sent as JSON body fields (None: it can): only null, booleans, finite numbers,
    strings, lists and mappings with string keys. A YAML date, set, `!!binary` or `.nan` would otherwise make the
    first request fail to encode. `where` is the path inside `value` (`a.b[2]`)."""
    pending: list[tuple[str, Any]] = [(str(key), inner) for key, inner in value.items()]
    while pending:
        where, item = pending.pop()
        if isinstance(item, dict):
            for key, inner in item.items():
                if not isinstance(key, str):
                    return where, f"holds the key {key!r}, not a string (a JSON key is a string)"
                pending.append((f"{where}.{key}", inner))
        elif isinstance(item, list):
            pending.extend((f"{where}[{index}]", inner) for index, inner in enumerate(item))
        elif isinstance(item, float) and not math.isfinite(item):
            return where, f"{item!r} is not a finite number (JSON has no NaN or infinity)"
        elif item is not None and not isinstance(item, bool | int | float | str):
            return where, f"a {type(item).__name__} is not a JSON value (null, boolean, number, string, list, mapping)"
    return None


class MatrixDecoding(Decoding):
    """Decoding as a matrix file may set it: counts strict, numbers finite (the sampler itself: chatapi.py), and
    `extra` only what a JSON body can carry (checked here, not by the first request)."""

    temperature: float = Field(1.0, ge=0, le=100, allow_inf_nan=False)
    repetition_penalty: float = Field(1.0, gt=0, le=100, allow_inf_nan=False, description="1.0 = off.")
    top_k: int = strict_count(0, ge=0, description="0 = off (sent as the stack's own 'off' value: 0 or -1).")
    max_tokens: int = strict_count(512)
    seed: int | None = strict_count(None, ge=0, le=MAX_RNG_SEED, description="Sampling seed; None = not sent.")

    @field_validator("extra")
    @classmethod
    def _sendable(cls, value: dict[str, Any]) -> dict[str, Any]:
        problem = json_value_problem(value)
        if problem is not None:
            raise ValueError(f"key {problem[0][:80]!r}: {problem[1]}; it cannot be sent in a request body")
        return value


class MatrixBootstrap(BootstrapSettings):
    """The bootstrap settings a matrix records: no unknown keys, strict and bounded (they reach numpy)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    resamples: int = strict_count(BootstrapSettings().resamples, le=MAX_RESAMPLES)
    rng_seed: int = strict_count(BootstrapSettings().rng_seed, ge=0, le=MAX_RNG_SEED)


class StackEntry(_Strict):
    """One stack config: a stack definition, one of its tool configurations, and where it runs."""

    id: str | None = Field(None, description="Label used in cell ids and tables; default stack-toolconfig.")
    stack: str = Field(description="A stack definition in stacks/.")
    tool_config: str | None = Field(None, description="Named tool configuration; default: the stack's default.")
    launcher: LauncherKind = "process"
    host: Host = "cpu"
    network: Literal["host", "published"] = "published"
    image: str | None = Field(None, description="Override the stack's pinned image (docker).")
    binary: str | None = Field(None, description="Override the server binary (process).")
    url: str | None = Field(None, description="Base URL of a running server (attach).")
    ctx: int | None = strict_count(None, ge=256, le=100_000_000, description="Context length passed to the server.")
    extra_args: list[str] = Field(default_factory=list)
    gpus: int | None = strict_count(
        None, le=1024, description="GPUs to request (e.g. with --tensor-parallel-size 2); default: the stack's count."
    )
    resources: RayResources = Field(
        default_factory=dict,
        description="Ray executor: custom resources a server of this stack config needs, e.g. {'host:gpu-a100': 1}.",
    )
    _spec: StackSpec | None = PrivateAttr(default=None)

    @field_validator("id")
    @classmethod
    def _file_safe(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value, LABEL, "a stack id")

    @field_validator("image", "binary", "url", "extra_args")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        return no_nul(value)

    @model_validator(mode="after")
    def _known(self, info: ValidationInfo) -> StackEntry:
        if self._spec is not None:  # an entry validated already (pydantic reruns this when a Cell holds it)
            return self
        try:
            spec = assets_in(info).stack(self.stack)
        except UnknownStackError as exc:
            raise ValueError(str(exc)) from None
        self._spec = spec  # resolved once, carried by the entry (runner/config/resolve.py)
        if self.tool_config is not None and self.tool_config not in spec.tool_configs:
            raise ValueError(
                f"stack {self.stack!r} has no tool configuration {self.tool_config!r} "
                f"(known: {', '.join(spec.tool_configs)})"
            )
        if self.launcher == "attach" and not self.url:
            raise ValueError("the attach launcher needs url")
        if self.launcher != "attach" and spec.launch is None:
            raise ValueError(f"stack {self.stack!r} cannot be launched; use launcher: attach with a url")
        return self

    @property
    def label(self) -> str:
        return self.id or f"{self.stack}-{self.resolved_tool_config}"

    @property
    def spec(self) -> StackSpec:
        """The stack definition this entry was validated against (the checkout's, or a recorded run's)."""
        if self._spec is None:
            raise RuntimeError(f"stack entry {self.stack!r} was built without validation: no definition resolved")
        return self._spec

    @property
    def resolved_tool_config(self) -> str:
        return self.tool_config or self.spec.default_tool_config


class ModelSource(_Strict):
    asset: str | None = Field(None, description="A model asset of `orchestrate assets` (GGUF or its HF conversion).")
    path: str | None = Field(None, description="Explicit GGUF file or HF directory.")
    tag: str | None = Field(None, description="Served name / Ollama tag / hosted model id.")
    hub: str | None = Field(None, description="A hub repo id the server downloads itself (GPU hosts), e.g. Qwen/...")
    call_format: str | None = Field(None, description="The model's call format on this stack; wins over the model's.")

    @field_validator("call_format")
    @classmethod
    def _known_format(cls, value: str | None) -> str | None:
        return None if value is None else check_call_format(value)

    @field_validator("asset", "path", "tag", "hub")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        return no_nul(value)

    @model_validator(mode="after")
    def _one(self) -> ModelSource:
        if sum(bool(v) for v in (self.asset, self.path, self.tag, self.hub)) != 1:
            raise ValueError("a model source needs exactly one of asset, path, tag or hub")
        return self


class ModelEntry(_Strict):
    name: str = Field(description="Model label in tables.")
    sources: dict[str, ModelSource] = Field(description="Per stack: where this stack gets the model.")
    quantization: str | None = None
    digest: str | None = Field(None, description="Expected sha256 of the model file, when pinned.")
    turn_cap: int | None = strict_count(
        None, le=MAX_TURN_CAP, description="This model's turn cap where it must differ from the matrix's (per cell)."
    )
    call_format: str = Field(
        AUTO_FORMAT, description="How its text calls are read: auto (every recogniser) or one of textcalls.FORMATS."
    )

    resources: RayResources = Field(
        default_factory=dict,
        description="Ray executor: custom resources a server of this model needs (added to its stack config's).",
    )

    @field_validator("call_format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        return check_call_format(value)

    @field_validator("name")
    @classmethod
    def _file_safe(cls, value: str) -> str:
        return check_name(value, MODEL_NAME, "a model name")

    def call_format_for(self, stack: str) -> str:
        """The call format this model's cells on `stack` are read with: the stack's source's, else its own."""
        source = self.sources.get(stack)
        return (source.call_format if source else None) or self.call_format


_STRICT_COUNT: TypeAdapter[int] = TypeAdapter(Annotated[int, Field(strict=True, ge=1, le=MAX_COUNT)])


def _case_count(value: Any) -> int | str | None:
    """A strict count, or `all` (bfcl): one error in the strict count's own words, not one per union member."""
    if value is None or value == "all":
        return value  # type: ignore[no-any-return]
    try:
        return _STRICT_COUNT.validate_python(value)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise PydanticCustomError(error["type"], error["msg"]) from None


class TaskEntry(_Strict):
    suite: str
    seeds: list[str] | None = Field(None, description="Seed ids; default: the first `count` seeds.")
    count: Annotated[int | Literal["all"] | None, PlainValidator(_case_count)] = Field(
        None, description="Seeds to run (the first N); bfcl: cases per category, `all` for every case."
    )
    categories: list[str] | None = Field(None, description="bfcl only: the BFCL categories to run (one cell each).")

    _suite: Suite | None = PrivateAttr(default=None)

    @field_validator("suite")
    @classmethod
    def _known_suite(cls, value: str, info: ValidationInfo) -> str:
        check_name(value, LABEL, "a suite name")  # it names a file under seeds/
        if value == BFCL_SUITE:  # built from the pinned package's data (runner/suites/bfclcases.py)
            return value
        try:
            assets_in(info).suite(value)
        except SuiteError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("seeds")
    @classmethod
    def _known_seeds(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if value == []:  # never "all seeds": a list that selects nothing is a mistake, said so
            raise ValueError("an empty list selects no seed: leave `seeds` out to run the first `count` (or all)")
        name = info.data.get("suite")
        if value is None or name is None:  # no suite: its own error is the one reported
            return value
        if name == BFCL_SUITE:
            raise ValueError("bfcl selects its cases by `categories` and `count` (a stable rule), not by `seeds`")
        known = [seed.id for seed in assets_in(info).suite(name).seeds]
        for index, seed in enumerate(value):
            if seed not in known:
                shown = f"{', '.join(known[:4])}, … {len(known)} in all"
                raise ValueError(f"seeds[{index}]: suite {name!r} has no seed {seed[:80]!r} (known: {shown})")
        repeated = sorted({seed for seed in value if value.count(seed) > 1})
        if repeated:
            raise ValueError(f"seed {repeated[0]!r} is listed twice")
        return value

    @model_validator(mode="after")
    def _enough(self, info: ValidationInfo) -> TaskEntry:
        if self._suite is not None:  # validated already: keep what it was resolved to
            return self
        if self.seeds is not None and self.count is not None:  # which one runs would be a silent choice
            raise ValueError(
                f"give `seeds` or `count`, not both: count {self.count} would be ignored for the "
                f"{len(self.seeds)} seed(s) listed"
            )
        if self.suite == BFCL_SUITE:
            return self._resolve_bfcl(info)
        if self.categories is not None or self.count == "all":
            raise ValueError("`categories` and `count: all` are for the bfcl suite only")
        self._suite = assets_in(info).suite(self.suite)  # resolved once, carried by the entry
        available = len(self._suite.seeds)
        if self.count is not None and self.count > available:  # type: ignore[operator]
            raise ValueError(f"count: suite {self.suite!r} has {available} seeds, not {self.count}")
        return self

    def _resolve_bfcl(self, info: ValidationInfo) -> TaskEntry:
        if not self.categories:
            raise ValueError("bfcl needs `categories` (one cell each): e.g. [simple_python, multiple, irrelevance]")
        if len(set(self.categories)) != len(self.categories):
            raise ValueError("categories: a category is listed twice")
        try:
            self._suite = assets_in(info).bfcl_suite(tuple(self.categories), self.count)
        except SuiteError as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def resolved_suite(self) -> Suite:
        """The suite this entry was validated against (an MCP suite's tools not listed yet)."""
        if self._suite is None:
            raise RuntimeError(f"task entry {self.suite!r} was built without validation: no suite resolved")
        return self._suite

    def seed_ids(self) -> list[str]:
        suite = self.resolved_suite
        if self.seeds is not None:
            return list(self.seeds)
        if suite.benchmark is not None:  # its selection is the suite
            return [seed.id for seed in suite.seeds]
        return [seed.id for seed in suite.seeds][: self.count or len(suite.seeds)]  # type: ignore[misc]


MAX_SECONDS = 7 * 24 * 3600.0  # a week: any longer wait is a typo, and inf would never end a run


def seconds(default: float | None, *, positive: bool = True, description: str | None = None) -> Any:
    """A finite duration in seconds (`.inf` and `.nan` refused)."""
    bound = {"gt": 0} if positive else {"ge": 0}
    return Field(default, le=MAX_SECONDS, allow_inf_nan=False, description=description, **bound)


class Timeouts(_Strict):
    request_s: float = seconds(180.0, description="A whole request; a stream's deadline too.")
    ready_s: float = seconds(600.0)
    first_byte_s: float | None = seconds(
        None, description="Streams: the first byte of the answer within this (default request_s)."
    )
    stream_gap_s: float = seconds(60.0, description="Streams: the longest silence between events.")

    @property
    def first_byte(self) -> float:
        return self.first_byte_s or self.request_s

    def stream_limits(self) -> StreamTimeouts:
        """The three limits a streamed request is read within (what a streamed cell records, and runs by)."""
        return StreamTimeouts(first_byte_s=self.first_byte, gap_s=self.stream_gap_s, total_s=self.request_s)


class Retries(_Strict):
    max_attempts: int = strict_count(
        3, le=100, description="Attempts per turn while no model output arrives (transport error, 5xx, 429)."
    )
    backoff_s: float = seconds(1.0, positive=False, description="Wait before attempt k+1: backoff_s * k.")
    max_retry_after_s: float = seconds(60.0, positive=False, description="Bound on a 429's Retry-After wait.")


class Exclude(_Strict):
    stack: str | None = None
    model: str | None = None
    mode: ToolsMode | None = None
