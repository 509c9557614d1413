"""Run a task in a child process and tell what became of it.

Every task that touches candidate code (one build, one run) gets a new
Python process: `python -m kb_eval.isolation` reads one task from its stdin, calls
`module:function(payload, workdir)`, writes the returned dict to a result file and exits.
The parent never imports what the task runs. It watches the child from outside:
- a wall timeout, a host-memory limit (RSS of the child's process group, polled) and an
  output limit (stdout+stderr go to a log file whose size is polled); any of them kills
  the whole process group;
- after the child ends, the group is killed again, and orphans that the child's
  descendants left (they are re-parented to us, a child subreaper) are killed too;
- the verdict is read from the exit status and the result file only after exit, so a
  crash cannot leave half a message behind.
A child is forked from a zygote of its environment (forkserver, zygote: torch imported
once, milliseconds per child instead of seconds of Python + torch start-up) where it can
be, else started afresh; spare children per environment are started ahead and wait
(torch imported, the CUDA context opened if asked) for their task on stdin; each child
still runs exactly one task. Trusted work that gains from keeping state (the reference
side: each problem's model and outputs) runs in a `Server`: one long-lived child, watched
the same way per task, answering each through its result file, replaced by a fresh one
when it fails.

Modules: oneshot (run_isolated), server (Server), spares (pre-started children), handle
(the parent's handle on one child: start, send, watch, kill), forkserver (the parent's
side of the zygotes), zygote (the zygote process), outcome (ChildOutcome, read after
exit), procs (process groups, orphans, /proc), child (the child side).
"""

from kb_eval.isolation import procs
from kb_eval.isolation.child import CORES_VAR, NICE_VAR
from kb_eval.isolation.handle import BUILD_POLL_S, POLL_S
from kb_eval.isolation.oneshot import THREAD_SAFE, run_isolated, start_spares
from kb_eval.isolation.outcome import ChildOutcome
from kb_eval.isolation.procs import CHECK_S, MARKER, kill_running
from kb_eval.isolation.server import Server

__all__ = ["BUILD_POLL_S", "CHECK_S", "CORES_VAR", "MARKER", "NICE_VAR", "POLL_S",
           "THREAD_SAFE", "ChildOutcome", "Server", "kill_running", "run_isolated",
           "start_spares"]

# Private names, as they were in the single-module isolation, that the eval's reaper
# (kb_eval.eval.schedule.reaper) and the tests reach for.
_LIVE = procs.LIVE
_become_subreaper = procs.become_subreaper
_proc_children = procs.proc_children
