"""Run a task in a child process and tell what became of it.

Every task that touches candidate code gets a new process, which calls
`module:function(payload, workdir)` and writes the returned dict to a result file. The
parent never imports what the task runs; it watches from outside: a wall timeout, a
host-memory limit and an output limit kill the whole process group; after exit the group
and its orphans are killed again; the verdict comes from the exit status and the result
file. Children fork from a per-environment zygote with torch imported; each runs one
task. Trusted stateful work runs in a `Server`, watched the same way per task.
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
