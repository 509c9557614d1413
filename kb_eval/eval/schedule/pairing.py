"""Paired timing: the reference and the candidate timed in alternating rounds within one
sample's timing step, so both see the same machine and a speedup's interval comes from
round-by-round ratios (judge/confidence.py).

Before each round the candidate's child writes `ready_<r>` and waits for `go_<r>`; this
parent thread stops the child's process group (SIGSTOP), has the trusted reference
server time the reference's rounds due, resumes the child and writes the go. Order ABBA,
so neither side always goes first. On a GPU both sides launch from the same CPU core
(pinning.py), asserted at every handshake.
"""

from __future__ import annotations

import os
import shutil
import statistics
import signal
import threading
from pathlib import Path

from kb_eval import clocks
from kb_eval.eval.schedule import pinning
from kb_eval.isolation.procs import stat_fields
from kb_eval.eval.child.paired import ROUNDS_FILE
from kb_eval.eval.wire.protocol import PairedTiming
from kb_eval.timing import (SLOW_CUT_MIN_ROUNDS, TimingSettings, cut_rounds, kept,
                            paired_rounds)

POLL_S = 0.0005  # the child's ready: each round waits for it (21 a sample)


def reference_rounds_before(r: int, rounds: int) -> list[int]:
    """The reference rounds to time when the candidate is ready for its round `r`
    (`r == rounds`: after its last round)."""
    due = [r - 1] if r % 2 == 0 and r > 0 else []
    return due + ([r] if r % 2 == 0 and r < rounds else [])


class Pairing(threading.Thread):
    """Answers one candidate child's handshakes for `rounds` rounds; `ref_ms[r]` holds
    the reference's times of round r. `error` says why pairing failed (the sample then
    keeps its unpaired interval)."""

    def __init__(self, time_rounds, folder: Path, settings: TimingSettings,
                 forbidden: set[int], core: int | None = None, server_pid=lambda: None):
        super().__init__(daemon=True, name="kb_eval-pairing")
        # (rounds, settings) -> [{"ms", "busy_ms", ...} per round], from the reference
        # server: the rounds due at one handshake, timed back to back in one call
        self.time_rounds = time_rounds
        self.settings, self.rounds = settings, len(paired_rounds(settings))
        self.cut = False  # timed in fewer rounds (timing.plan_timing's slow cut)
        self.folder, self.forbidden = folder, forbidden
        self.core, self.server_pid = core, server_pid  # pinning.py; None: not pinned
        self.server_masks: dict[int, set[int]] = {}  # each server pid's mask before
        self.ref_ms: dict[int, list[float]] = {}
        self.busy_ms = 0.0  # the longest wait for a quiet GPU before a reference round
        self.launch_ms: list[float] = []  # each reference round's median launch time (GPU)
        # Where the timing step's time goes (phases.pair_reference*): the reference's
        # rounds from stop to resume, and the part of it in the reference's timed calls.
        self.ref_wall_s = self.ref_calls_s = 0.0
        self.ref_spent: dict[str, float] = {}  # the server's own account (timing.SPENT)
        self.error: str | None = None
        self.done = threading.Event()
        folder.mkdir(parents=True, exist_ok=True)

    def run(self) -> None:
        r = 0
        while r <= self.rounds and not self.done.is_set():
            if (self.folder / f"ready_{r}").exists():
                if r == 0:
                    self._take_cut()
                self._answer(r)
                r += 1
            else:
                self.done.wait(POLL_S)

    def finish(self) -> dict[int, list[float]] | None:
        """Stop (the child has ended); the reference's rounds, or None when incomplete."""
        self.done.set()
        self.join()
        for pid, mask in self.server_masks.items():
            pinning.restore(pid, mask)
        if self.error is None and len(self.ref_ms) < self.rounds:
            self.error = f"{len(self.ref_ms)} of {self.rounds} reference rounds timed"
        return None if self.error else dict(self.ref_ms)

    def _take_cut(self) -> None:
        """The fewer rounds a very slow candidate's child announced: taken when fewer than
        planned and at least SLOW_CUT_MIN_ROUNDS (candidate code could write the file: a cut
        only widens its interval, and the verdict warns when its calls were not that slow)."""
        try:
            k = int((self.folder / ROUNDS_FILE).read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError):
            k = -1
        if not SLOW_CUT_MIN_ROUNDS <= k <= self.rounds:
            self.error = f"the candidate's child asked for {k} paired rounds"
            return
        self.settings, self.rounds, self.cut = cut_rounds(self.settings, k), k, True

    def _answer(self, r: int) -> None:
        due = reference_rounds_before(r, self.rounds)
        pgid = self._child_group() if self.error is None else None
        if due and pgid is None and self.error is None:
            self.error = "the candidate's child could not be identified"
        if pgid is not None:
            self._pin(pgid)
        if due and pgid is not None:
            os.killpg(pgid, signal.SIGSTOP)
            stopped = clocks.monotonic()
            try:
                for q, timed in zip(due, self.time_rounds(due, self.settings)):
                    self.ref_ms[q] = timed["ms"]
                    self.ref_calls_s += sum(timed["ms"]) / 1e3
                    self.busy_ms = max(self.busy_ms, timed["busy_ms"])
                    if timed.get("launch_ms") is not None:
                        self.launch_ms.append(timed["launch_ms"])
                    for part, seconds in timed.get("spent", {}).items():
                        self.ref_spent[part] = self.ref_spent.get(part, 0.0) + seconds
            except Exception as e:  # noqa: BLE001 - the sample keeps its unpaired interval
                self.error = f"reference round: {type(e).__name__}: {e}"[:300]
            finally:
                os.killpg(pgid, signal.SIGCONT)
                self.ref_wall_s += clocks.monotonic() - stopped
        (self.folder / f"go_{r}.tmp").write_text("")
        os.replace(self.folder / f"go_{r}.tmp", self.folder / f"go_{r}")

    def _pin(self, child: int) -> None:
        """Both launching threads on `self.core` before the rounds that follow (in a
        sandbox, the child's group leads with its init: the candidate is the init's child)."""
        if self.core is None:
            return
        pinning.pin(sandboxed_main(child) or child, self.core)
        server = self.server_pid()
        if server is not None and (mask := pinning.pin(server, self.core)) is not None:
            self.server_masks.setdefault(server, mask)

    def _child_group(self) -> int | None:
        """The process group of the child that wrote its pid before candidate code ran.
        The file is writable by the candidate later, so the pid must still be a child of
        ours, lead its own group and not be one we must never stop (the servers)."""
        try:
            pid = int((self.folder / "pid").read_text())
            pgid = os.getpgid(pid)
            ppid = int(stat_fields(pid)[1])
        except (OSError, ValueError, IndexError, TypeError):
            return None
        ok = ppid == os.getpid() and pgid == pid and pgid not in self.forbidden
        return pgid if ok and pgid != os.getpgid(0) else None


def sandboxed_main(leader: int) -> int | None:
    """The child proper under a sandbox's init `leader` (isolation/sandbox.py): the
    init's only child in its group; None when `leader` is no such init."""
    try:
        cmdline = Path(f"/proc/{leader}/cmdline").read_bytes()
        if b"\0-I\0-S\0-c\0" not in cmdline:
            return None
    except OSError:
        return None
    try:
        kids = [int(k) for k in
                Path(f"/proc/{leader}/task/{leader}/children").read_text().split()]
    except OSError:  # a kernel without the children file: look for them
        kids = [int(e) for e in os.listdir("/proc") if e.isdigit()
                and (fields := stat_fields(e)) is not None and fields[1] == str(leader)]
    return min(kids) if kids else None


def start_pairing(ctx, refs, problem, device: str, run_dir: Path, payload: dict,
                  settings) -> Pairing | None:
    """Pair this sample's timing under its `settings` (adds `paired` to the child's
    payload), unless there is no timing or too few trials for rounds."""
    rounds = paired_rounds(settings)
    if payload.get("timing") is None or not rounds:
        return None
    folder = run_dir / "pair"
    shutil.rmtree(folder, ignore_errors=True)  # a retry's child starts afresh
    payload["paired"] = {"dir": str(folder)}

    def time_rounds(due: list[int], s: TimingSettings) -> list[dict]:
        ks = [len(kept(s, r, list(paired_rounds(s)[r]))) for r in due]
        return refs.time_rounds(problem, device, due, ks, s)

    pairing = Pairing(time_rounds, folder, settings, refs.server_pids(),
                      pinning.core_for(device), lambda: refs.server_pid(device))
    pairing.start()
    return pairing


def finish_pairing(pairing: Pairing | None) -> PairedTiming | None:
    """What the verdict needs (wire/protocol.PairedTiming), None when not paired: the
    reference's times per round or why there are none, the GPU's busy time while the
    candidate was stopped, the reference's launch time, and the settings when cut."""
    if pairing is None:
        return None
    ref = pairing.finish()
    # the settings both sides timed with, when the candidate was timed in fewer rounds
    cut = pairing.settings if pairing.cut else None
    if ref is None:
        return PairedTiming(error=pairing.error, timing=cut)
    launches = pairing.launch_ms
    return PairedTiming(rounds=[ref[r] for r in range(pairing.rounds)], timing=cut,
                        busy_ms=pairing.busy_ms,
                        launch_ms=statistics.median(launches) if launches else None,
                        ref_wall_s=pairing.ref_wall_s, ref_calls_s=pairing.ref_calls_s,
                        ref_spent=pairing.ref_spent)
