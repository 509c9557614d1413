"""Where a throughput pass's time went (benchmarks/eval_throughput.py prints these): the
timing lock's share of the wall, the waits for it and who held the device meanwhile (from
the devices' lock trace, kb_eval/devlock.py), the compile work done inside run children
(from the records' phases), and the verdicts against the corpus's expected.json.

A child takes the lock exclusive for its timing step right after letting go of its shared
hold (DeviceLock.acquire releases first), so in the trace its wait runs from that release
to its exclusive hold's start. The records say the same wait as `child_wait_lock`; the
two are matched by length to name the sample that waited.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Hold:
    pid: str
    mode: str
    start: float
    end: float


@dataclass
class Wait:
    pid: str
    device: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def read_trace(trace: Path) -> tuple[dict[str, list[Hold]], list[Wait]]:
    """Per device its holds, and every exclusive wait (module docstring). A hold still
    open at the trace's end ends there."""
    lines = [ln.split() for ln in Path(trace).read_text().splitlines() if ln.strip()]
    events = sorted((float(t), event == "+", pid, device, mode)
                    for t, pid, device, mode, event in lines)
    holds: dict[str, list[Hold]] = defaultdict(list)
    open_: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    released: dict[tuple[str, str], float] = {}
    waits = []
    last = events[-1][0] if events else 0.0
    for t, start, pid, device, mode in events:
        if start:
            open_[(device, pid, mode)].append(t)
            if mode == "exclusive" and (device, pid) in released:
                waits.append(Wait(pid, device, released.pop((device, pid)), t))
            continue
        began = open_[(device, pid, mode)]
        if began:
            holds[device].append(Hold(pid, mode, began.pop(0), t))
        if mode == "shared":
            released[(device, pid)] = t
        else:
            released.pop((device, pid), None)
    for (device, pid, mode), starts in open_.items():
        holds[device].extend(Hold(pid, mode, s, last) for s in starts)
    return holds, waits


def _holders(holds: list[Hold], wait: Wait) -> list[tuple[float, Hold]]:
    """The other processes' holds during a wait, longest overlap first."""
    over = [(min(h.end, wait.end) - max(h.start, wait.start), h) for h in holds
            if h.pid != wait.pid and h.start < wait.end and h.end > wait.start]
    return sorted((o for o in over if o[0] > 0), key=lambda o: -o[0])


def _name_pids(waits: list[Wait], records: list) -> dict[str, str]:
    """pid -> the sample whose child_wait_lock is nearest its traced wait (one each)."""
    left = [(r.phases.get("child_wait_lock"), f"{r.key} s{r.sample}") for r in records
            if r.phases.get("child_wait_lock") is not None]
    names = {}
    for w in sorted(waits, key=lambda w: -w.seconds):
        if not left:
            break
        i = min(range(len(left)), key=lambda j: abs(left[j][0] - w.seconds))
        names[w.pid] = left.pop(i)[1]
    return names


def lock_lines(trace: Path, records: list, wall: float, devices: int) -> list[str]:
    """The timing lock's share of the wall, the waits per sample, the longest and its
    holders."""
    if not Path(trace).exists() or not Path(trace).stat().st_size:
        return ["timing lock: no trace"]
    holds, waits = read_trace(trace)
    alone = sum(h.end - h.start for hs in holds.values() for h in hs if h.mode == "exclusive")
    lines = [f"timing lock held alone {alone:.1f} s: {alone / (wall * devices):.0%} of the "
             f"wall x {devices} device(s)"]
    waited = [r.phases["child_wait_lock"] for r in records if "child_wait_lock" in r.phases]
    if waited:
        lines.append(f"lock wait per sample (child_wait_lock, {len(waited)} timed): median "
                     f"{statistics.median(waited):.2f} s, max {max(waited):.2f} s, "
                     f"sum {sum(waited):.0f} s")
    if not waits:
        return lines
    names = _name_pids(waits, records)
    exclusive = defaultdict(int)
    for hs in holds.values():
        for h in hs:
            exclusive[h.pid] += h.mode == "exclusive"
    worst = max(waits, key=lambda w: w.seconds)
    lines.append(f"longest wait {worst.seconds:.2f} s by {names.get(worst.pid, 'pid ' + worst.pid)}"
                 f" on {worst.device}; held meanwhile by:")
    holders = _holders(holds[worst.device], worst)
    if not holders:
        lines[-1] = lines[-1].replace("; held meanwhile by:", "; no other hold meanwhile")
    for overlap, h in holders[:4]:
        who = names.get(h.pid) or ("a reference server" if exclusive[h.pid] > 1 else
                                   "a child never timed (failed) or a server")
        lines.append(f"    {who} (pid {h.pid}), {h.mode}, {overlap:.2f} s of it")
    return lines


def compile_lines(records: list, correct_trials: int) -> list[str]:
    """Compile work inside run children, estimated per sample as its import (child_load)
    plus its init, first calls and correctness beyond the problem's lightest sample in the
    pass and its own calls: the records hold no compile time of their own."""
    load, rest = defaultdict(list), {}
    for r in records:
        if "child_load" not in r.phases:
            continue
        calls = correct_trials * (r.timing.mean / 1e3 if r.timing else 0.0)
        extra = r.phases.get("child_correctness", 0.0) - calls
        load[r.key].append(r.phases["child_load"])
        rest[(r.key, r.sample)] = (r.phases["child_load"], extra)
    floor = {key: (min(v[0] for (k, _), v in rest.items() if k == key),
                   min(v[1] for (k, _), v in rest.items() if k == key)) for key in load}
    est = sorted(((lo - floor[k][0] + max(0.0, ex - floor[k][1]), f"{k} s{s}")
                  for (k, s), (lo, ex) in rest.items()), reverse=True)
    if not est:
        return ["compile in run children: no child phases in the records"]
    big = [e for e in est if e[0] > 1.0]
    ahead = [r.build.first_call_s for r in records if r.build and r.build.first_call_s]
    return [f"compile in run children (estimate): {sum(e[0] for e in est):.0f} s, "
            f"{len(big)} samples over 1 s; most {est[0][0]:.1f} s ({est[0][1]}); "
            f"in the build pool ahead of them: {sum(ahead):.0f} s over {len(ahead)} first calls"]


ERRORS = {"compile_error", "runtime_error", "crashed", "timeout", "oom", "output_flood"}


def expected_lines(records: list, corpus: Path | None) -> list[str]:
    """Verdicts against the corpus's expected.json (correct | incorrect | error)."""
    path = corpus / "expected.json" if corpus else None
    if path is None or not path.exists():
        return []
    expected = json.loads(path.read_text())
    off = []
    for r in records:
        want = expected.get(f"level{r.level}_problem{r.problem_id}_sample{r.sample}.py")
        got = "error" if r.status in ERRORS else r.status
        if want and got != want["verdict"]:
            off.append(f"{r.key} s{r.sample} ({want['kind']}): expected {want['verdict']}, "
                       f"got {r.status}")
    head = f"verdicts as expected.json says: {len(records) - len(off)} of {len(records)}"
    return [head] + ["    " + line for line in off[:12]]
