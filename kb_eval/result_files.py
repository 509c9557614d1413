"""What every file we write carries, and how we write and read them (atomically).

Each file carries a `FileHeader` (schema version, hardware, versions, precision, what
produced it), so numbers from different machines or settings are never mixed by
accident. Writes are atomic: a crash leaves the previous complete file.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, Field, ValidationError

from kb_eval import __version__
from kb_eval.errors import UserError
from kb_eval.timing import TimingSettings

SCHEMA_VERSION = 1
M = TypeVar("M", bound=BaseModel)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def slugify(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def cpu_model() -> str:
    """The CPU's marketing name, from /proc/cpuinfo (platform.processor() is often empty
    on Linux), else platform's answers."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip():
            fields.setdefault(key.strip().lower(), value.strip())
    for key in ("model name", "cpu model", "hardware", "processor"):
        value = fields.get(key, "")
        if value and not value.isdigit():  # x86's "processor : 0" is an index, not a name
            return value
    return platform.processor() or platform.machine() or "unknown CPU"


class HardwareInfo(BaseModel):
    device: str  # "cuda" or "cpu"
    name: str
    slug: str
    torch_version: str
    cuda_version: str | None = None
    capability: str | None = None
    num_sms: int | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None
    cpu: str = Field(default_factory=cpu_model)
    cpu_count: int = Field(default_factory=lambda: os.cpu_count() or 1)
    python: str = Field(default_factory=lambda: sys.version.split()[0])

    @classmethod
    def detect(cls, device: str | None = None) -> "HardwareInfo":
        """Describe the device that `device` (default: cuda:0 if present) names."""
        import torch

        use_cuda = torch.cuda.is_available() and (device is None or device.startswith("cuda"))
        if not use_cuda:
            return cls(device="cpu", name=cpu_model(),
                       slug="cpu", torch_version=torch.__version__)
        idx = torch.device(device or "cuda").index or 0
        p = torch.cuda.get_device_properties(idx)
        return cls(device="cuda", name=p.name, slug=slugify(p.name),
                   torch_version=torch.__version__, cuda_version=torch.version.cuda,
                   capability=f"{p.major}.{p.minor}", num_sms=p.multi_processor_count,
                   l2_bytes=getattr(p, "L2_cache_size", None), memory_bytes=p.total_memory)


class Producer(BaseModel):
    tool: str
    version: str = __version__
    argv: list[str] = Field(default_factory=lambda: list(sys.argv))  # this invocation's
    # Every invocation that wrote the file, oldest first (a --resume adds one)
    invocations: list[list[str]] = Field(default_factory=list)

    def continuing(self, old: "Producer | None") -> "Producer":
        """This producer, with the invocations of the file it continues before its own."""
        past = (old.invocations or [old.argv]) if old is not None else []
        return self.model_copy(update={"invocations": [*past, list(self.argv)]})


def stored_fields(path: Path) -> dict:
    """The top-level fields of a file about to be continued ({}: none, or unreadable)."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def stored_producer(path: Path) -> Producer | None:
    """produced_by of a file about to be continued (None: no file, or none readable)."""
    try:
        return Producer.model_validate(stored_fields(path)["produced_by"])
    except (KeyError, ValidationError):
        return None


class FileHeader(BaseModel):
    schema_version: int = SCHEMA_VERSION
    kind: str
    created: str = Field(default_factory=now_iso)
    updated: str = Field(default_factory=now_iso)
    produced_by: Producer
    hardware: HardwareInfo
    precision: str
    timing: TimingSettings


def _umask() -> int:
    """The process umask, read from /proc where it can be (os.umask reads by setting it,
    a race with other threads creating files)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json_atomic(path: Path, data: BaseModel | dict | list) -> None:
    """Write JSON via a temp file in the same folder and an atomic rename, with the mode
    a plain open() would give (mkstemp's is 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (data.model_dump_json(indent=1) if isinstance(data, BaseModel)
            else json.dumps(data, indent=1, default=str))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_model(path: Path, cls: type[M]) -> M:
    """Load and validate a file we wrote; a broken or foreign file is a user error."""
    try:
        raw: Any = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"{path} does not exist") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{path} is not valid JSON ({e})") from None
    if isinstance(raw, dict) and raw.get("schema_version") not in (None, SCHEMA_VERSION):
        raise UserError(f"{path} has schema_version {raw.get('schema_version')}, "
                        f"this kb-eval reads {SCHEMA_VERSION}")
    try:
        return cls.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        raise UserError(f"{path}: field {'.'.join(map(str, first['loc']))}: {first['msg']}") from None

