"""Reference outputs: computed in their own child, cached per problem/seed/precision, and
guarded against candidates that vandalise files.

Folder: `<cache>/runs/<invocation>/refs/<source>/<problem-slug>/<precision>/<seed-tag>-g<n>/
<label>.pt`, outside every candidate's workdir. A problem's reference runs lazily, the
first time one of its candidates has run (so the first candidate of a problem never runs
while its reference outputs exist), and again only for labels not computed yet (timed
calls a re-check picked). With a live baseline the first reference run also times the
model. A reference that fails fails every sample of its problem, once.

Candidates run as the same user and could overwrite these files (zeros, say, so that a
later all-zeros answer passes). So: the reference child returns each file's sha256; the
parent notes each file's stat signature (size, inode, mtime, ctime: ctime cannot be set
back); after every candidate child, `changed()` names the problems whose files moved
(that candidate is flagged, those references are recomputed in a new folder), and
`read()` returns verified bytes, read on the device lane while no candidate runs there.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from kb_eval.eval.build import crash_info
from kb_eval.eval.context import EvalContext
from kb_eval.isolation import run_isolated
from kb_eval.problems import Problem
from kb_eval.results import CrashInfo
from kb_eval.timing import TimingStats


class ReferenceTampered(Exception):
    """A reference output file no longer has the bytes its child wrote."""


@dataclass
class ReferenceState:
    base: Path
    generation: int = 0
    labels: set[str] = field(default_factory=set)
    seen: dict[str, dict] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)
    stats: dict[str, tuple] = field(default_factory=dict)
    timing: TimingStats | None = None
    timed: bool = False
    metrics: dict | None = None  # what the physical floor needs (first run measures it)
    error: str | None = None
    detail: str | None = None
    crash: CrashInfo | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def folder(self) -> Path:
        return self.base.with_name(f"{self.base.name}-g{self.generation}")

    def reset(self) -> None:
        """Forget the outputs (keep timing and errors): the next ensure recomputes them
        in a fresh folder."""
        self.generation += 1
        self.labels, self.seen, self.digests, self.stats = set(), {}, {}, {}


def parse_label(name: str) -> list:
    """correct_3 -> [correct, 3]; timing_7_<seed hex> -> [timing, 7, seed] (a candidate's
    timed call, with the OS-random seed its inputs came from)."""
    m = re.fullmatch(r"([a-z]+)_(\d+)(?:_([0-9a-f]{1,16}))?", name)
    if m is None:
        raise ValueError(f"not a label: {name!r}")
    return [m.group(1), int(m.group(2))] + ([int(m.group(3), 16)] if m.group(3) else [])


def stat_signature(path: Path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns


class ReferenceStore:
    def __init__(self, ctx: EvalContext):
        self.ctx = ctx
        self.root = ctx.invocation_dir / "refs"
        self._states: dict[str, ReferenceState] = {}
        self._guard = threading.Lock()

    def _state(self, problem: Problem) -> ReferenceState:
        with self._guard:
            if problem.key not in self._states:
                base = (self.root / problem.source.replace("/", "_") / problem.slug /
                        self.ctx.config.precision / self.ctx.seed_tag(problem))
                self._states[problem.key] = ReferenceState(base=base)
            return self._states[problem.key]

    def ensure(self, problem: Problem, labels: list[str], device: str) -> ReferenceState:
        """Outputs for `labels` exist in the returned state's folder (unless it has error)."""
        state = self._state(problem)
        with state.lock:
            missing = [lb for lb in labels if lb not in state.labels]
            want_timing = self.ctx.config.live_baseline and not state.timed
            if state.metrics is None:  # measured along with the first outputs
                missing = missing or [lb for lb in labels[:1]]
            if state.error or not (missing or want_timing):
                return state
            self._compute(problem, state, missing, want_timing, device)
            return state

    def read(self, problem: Problem, labels: list[str]) -> dict[str, bytes]:
        """The bytes of each label's output file, checked against the child's sha256."""
        state = self._state(problem)
        out = {}
        with state.lock:
            for label in labels:
                try:
                    data = (state.folder / f"{label}.pt").read_bytes()
                except OSError:
                    data = b""
                if hashlib.sha256(data).hexdigest() != state.digests.get(label):
                    raise ReferenceTampered(f"{problem.key}: reference output {label} changed")
                out[label] = data
        return out

    def changed(self) -> list[str]:
        """Keys of problems whose reference files differ from what their child wrote."""
        with self._guard:
            states = list(self._states.items())
        moved = []
        for key, state in states:
            with state.lock:
                if any(stat_signature(state.folder / f"{lb}.pt") != sig
                       for lb, sig in state.stats.items()):
                    moved.append(key)
        return moved

    def forget(self, problem: Problem, labels: list[str]) -> None:
        """Drop outputs no other sample will ask for (a candidate's own timed calls), so
        the folder does not grow by K outputs per sample."""
        state = self._state(problem)
        with state.lock:
            for label in labels:
                if label in state.labels:
                    (state.folder / f"{label}.pt").unlink(missing_ok=True)
                    state.labels.discard(label)
                    for table in (state.seen, state.digests, state.stats):
                        table.pop(label, None)

    def invalidate(self, key: str) -> None:
        with self._guard:
            state = self._states.get(key)
        if state is not None:
            with state.lock:
                state.reset()

    def _compute(self, problem: Problem, state: ReferenceState, labels: list[str],
                 want_timing: bool, device: str) -> None:
        cfg = self.ctx.config
        payload = {"problem_code": problem.code, "device": self.ctx.torch_device(device),
                   "precision": cfg.precision, "seed": self.ctx.problem_seed(problem),
                   "labels": [parse_label(lb) for lb in labels],
                   "timing": cfg.timing.model_dump() if want_timing else None,
                   "metrics": state.metrics is None, "floor_timing": cfg.timing.model_dump()}
        folder = state.folder
        folder.mkdir(parents=True, exist_ok=True)
        out = run_isolated("kb_eval.eval.worker:run_reference", payload, workdir=folder,
                           timeout_s=cfg.run_timeout_s, mem_limit_mb=cfg.mem_limit_mb,
                           env=self.ctx.device_env(device), prewarm=True,
                           warm_cuda=device != "cpu")
        if not out.ok:
            state.error = f"reference {out.describe()}"
            state.detail = out.output_tail[-4000:]
            if out.status != "error":
                state.crash = crash_info("reference", out)
            return
        result = out.result or {}
        state.labels.update(labels)
        state.seen.update(result.get("seen", {}))
        state.digests.update(result.get("digests", {}))
        if result.get("metrics") is not None:
            state.metrics = result["metrics"]
        for label in labels:
            if label in state.digests:  # (a shape the reference refuses has no file)
                state.stats[label] = stat_signature(folder / f"{label}.pt")
        if want_timing:
            state.timed = True
            state.timing = TimingStats.model_validate(result["timing"])
