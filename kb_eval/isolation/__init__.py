"""Run a task in a child process and tell what became of it.

Every task that touches candidate code (one build, one run) gets a new Python process,
which calls `module:function(payload, workdir)` and writes the returned dict to a result
file. The parent never imports what the task runs; it watches the child from outside:
- a wall timeout, a host-memory limit (RSS of the process group) and an output limit
  (the log file's size); any of them kills the whole process group;
- after the child ends, the group is killed again, and orphans its descendants left
  (re-parented to us, a child subreaper) are killed too;
- the verdict is read from the exit status and the result file only after exit, so a
  crash cannot leave half a message behind.
Children are forked from a per-environment zygote with torch imported where possible,
and spares wait ready for their task; each still runs exactly one task. Trusted stateful
work (the reference side) runs in a `Server`: one long-lived child, watched the same way
per task, replaced when it fails.
"""

from kb_eval.isolation import procs
from kb_eval.isolation.child import CORES_VAR, NICE_VAR
from kb_eval.isolation.handle import BUILD_POLL_S, POLL_S
from kb_eval.isolation.oneshot import run_isolated, start_spares
from kb_eval.isolation.outcome import ChildOutcome
from kb_eval.isolation.procs import kill_running
from kb_eval.isolation.server import Server

__all__ = ["BUILD_POLL_S", "CORES_VAR", "NICE_VAR", "POLL_S", "ChildOutcome", "Server",
           "kill_running", "run_isolated", "start_spares"]

# Private names the eval's reaper (kb_eval.eval.schedule.reaper) and the tests reach for.
_LIVE = procs.LIVE
_become_subreaper = procs.become_subreaper
_proc_children = procs.proc_children
