"""The messages between the parent (judge/references.py) and its reference server
(judge/reference_worker.py), typed: each request and answer is parsed as its model on
the other side, so neither reads a key the other never wrote. Answers carry only the keys
the server set (an answer without "error" went well).
"""

from __future__ import annotations

from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kb_eval.timing import TimingSettings, TimingStats

M = TypeVar("M", bound=BaseModel)


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProblemRequest(_Message):
    """What names a problem's loaded reference in the server (judge/loaded.py)."""
    problem_code: str
    device: str  # a torch device: cuda:0, cpu
    precision: Literal["fp32", "fp16", "bf16"]
    seed: int  # the problem's derived seed
    baseline_mode: str | None = None  # what a live baseline times (None: eager)


# ------------------------------------------------------------------ requests
class PlanRequest(_Message):
    """The memory plan's sizes (schedule/memplan_server.plan_problem)."""
    plan: Literal[True] = True
    drop: bool = False  # drop everything kept first (a retry after an OOM)
    problem_code: str
    device: str
    precision: Literal["fp32", "fp16", "bf16"]
    sizes: dict[str, int] | None = None  # kept from an earlier run (memplan.KeptSizes)


class EstimateRequest(ProblemRequest):
    """A rough time of one call (judge/rounds.estimate_call)."""
    estimate: Literal[True] = True


class RoundsRequest(ProblemRequest):
    """Paired timing rounds of the reference (judge/rounds.time_rounds)."""
    time_calls: Literal[True] = True
    rounds: list[int]
    timing: TimingSettings


class DeviceFloorRequest(_Message):
    """The device's own floor figures (judge/floor.device_floor)."""
    device_floor: TimingSettings  # the run's timer settings
    device: str
    peaks: bool = False  # measure the machine's peaks too (no peaks file yet)


class ExportSpec(_Message):
    """Device buffers for one sample's outputs (wire/device.py)."""
    key: str  # the sample's
    n: int = Field(ge=0)
    bytes: int = Field(ge=0)
    at_least: int | None = None  # as many as fit, but no fewer
    give_back: bool = False  # the server gives back what it keeps first


class ExportRequest(_Message):
    export: ExportSpec
    device: str


class FreeRequest(_Message):
    exchange_free: str  # the sample's key
    device: str


class CompareSpec(_Message):
    """Where the candidate's outputs are and how they are judged (judge/compare.py)."""
    folder: str
    atol: float | None = None
    rtol: float | None = None
    rule: str = "f64"  # the tolerance rule (correctness.resolve_tolerance)
    truth: bool = False  # compute the float64 truth when needed
    exchange: str | None = None  # the sample's device buffers, by key (freed after)


class CompareRequest(ProblemRequest):
    """A sample's comparison (judge/compare.compare_labels)."""
    # Labels as [kind, i] or [kind, i, seed] (wire/labels.parse_label)
    labels: list[tuple[str, int] | tuple[str, int, int]]
    compare: CompareSpec
    timing: TimingSettings | None = None  # time a live baseline too, with these settings
    metrics: bool = False  # measure the problem's floor metrics
    count_launches: bool = False  # count the reference's launches (with the metrics)
    keep_bytes: int = 0  # room to keep fixed outputs beside what is needed


ServerRequest = (PlanRequest | EstimateRequest | RoundsRequest | DeviceFloorRequest
                 | ExportRequest | FreeRequest | CompareRequest)
# The key that says a request's kind, in the order the server has always looked for it;
# a request with none of them is a comparison.
_KINDS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("plan", PlanRequest), ("time_calls", RoundsRequest), ("estimate", EstimateRequest),
    ("device_floor", DeviceFloorRequest), ("export", ExportRequest),
    ("exchange_free", FreeRequest))


# ------------------------------------------------------------------ answers
class PlanReply(_Message):
    in_bytes: int | None = None
    out_bytes: int | None = None
    weights_bytes: int | None = None
    itemsize: int | None = None
    meta_error: str | None = None  # why the sizes are unknown (no meta kernel, too long)
    free_bytes: int | None = None  # GPU: the device's free memory
    total_bytes: int | None = None
    reserved_bytes: int | None = None  # GPU: this server's own


class EstimateReply(_Message):
    ms: float | None = None  # None: no baseline to time (the compiler's limit)
    launch_ms: float | None = None  # GPU: until the call returned


class RoundAnswer(_Message):
    ms: list[float] | None = None  # the round's timed calls
    busy_ms: float = 0.0  # the GPU busy with other work before it (first round only)
    launch_ms: float | None = None  # GPU: the calls' median launch time
    spent: dict[str, float] = Field(default_factory=dict)  # the server's account
    error: str | None = None


class RoundsReply(_Message):
    rounds: list[RoundAnswer] | None = None  # one per round asked
    error: str | None = None


class DeviceFloorReply(_Message):
    empty_call_ms: float | None = None
    copy_bytes_per_s: float | None = None
    peaks_measured: dict | None = None  # peaks.measure's figures, when asked
    error: str | None = None


class ExportReply(_Message):
    handles: list[str] | None = None  # hex, for the child's payload
    bytes: int | None = None
    short: bool | None = None  # none fit beside what the server keeps: ask with give_back
    error: str | None = None  # no buffers: the sample uses files


class FreeReply(_Message):
    pass


class FloorMetrics(_Message):
    """What the physical floor needs of a problem (judge/floor.floor_metrics)."""
    in_bytes: int | None = None
    out_bytes: int | None = None
    peak_bytes: int | None = None
    launches: dict | None = None  # profile/launches.count_or_error's answer
    deterministic: bool | None = None
    l2_bytes: int | None = None
    work: dict | None = None  # kb_eval/work.ProblemWork's dump
    error: str | None = None


class CompareReply(_Message):
    seen: dict[str, dict] = Field(default_factory=dict)  # per label: what the reference showed
    diffs: dict[str, dict] = Field(default_factory=dict)  # per label: its comparison
    tolerance: dict = Field(default_factory=dict)  # atol, rtol, rule, source
    metrics: FloorMetrics | None = None
    timing: TimingStats | None = None  # a live baseline's
    timing_error: str | None = None  # why the live baseline could not be compiled
    spent: dict[str, float] = Field(default_factory=dict)  # the server's seconds, by part
    exchange_lost: bool = False  # the buffers named died with an earlier server


REPLIES: dict[type[BaseModel], type[BaseModel]] = {
    PlanRequest: PlanReply, EstimateRequest: EstimateReply, RoundsRequest: RoundsReply,
    DeviceFloorRequest: DeviceFloorReply, ExportRequest: ExportReply, FreeRequest: FreeReply,
    CompareRequest: CompareReply}


class MessageError(ValueError):
    """A message that is not what its model says: a bug of the evaluator, named."""


def _why(e: ValidationError) -> str:
    first = e.errors()[0]
    return f"{'.'.join(map(str, first['loc'])) or '(message)'}: {first['msg']}"


def parse_request(payload: object) -> ServerRequest:
    """The server's side: `payload` read as the request its kind key says."""
    if not isinstance(payload, dict):
        raise MessageError(f"reference server request: not an object: {type(payload).__name__}")
    cls = next((c for key, c in _KINDS if key in payload), CompareRequest)
    try:
        return cls.model_validate(payload)
    except ValidationError as e:
        raise MessageError(f"reference server request ({cls.__name__}): {_why(e)}") from None


def checked_reply(request: BaseModel, reply: dict) -> dict:
    """The server's side: its answer to `request`, checked against the reply model and
    sent with the keys it set."""
    cls = REPLIES[type(request)]
    try:
        return cls.model_validate(reply).model_dump(mode="json", exclude_unset=True)
    except ValidationError as e:
        raise MessageError(f"reference server answer ({cls.__name__}): {_why(e)}") from None


def parse_reply(cls: type[M], result: object) -> M:
    """The parent's side: a server's answer (None: an empty one) read as `cls`."""
    try:
        return cls.model_validate(result if result is not None else {})
    except ValidationError as e:
        raise MessageError(f"reference server answer ({cls.__name__}): {_why(e)}") from None
