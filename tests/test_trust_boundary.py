"""What a candidate's processes import of kb_eval, listed: a run child (isolation/child.py
running eval/child/worker.py) and a build child (eval/child/build_task.py: the build and
the lazy compile's first call). Each is loaded in a fresh interpreter, the build child
also runs both its tasks on a source that compiles nothing, and the kb_eval modules then
in sys.modules must be exactly the lists below: a new import into the process that runs
candidate code is a change made on purpose and reviewed here, not a side effect. None of
them is the scheduler's, the judge's, the CLI's, the inference client's or the report's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Both kinds: the child's entry (isolation/child.py) and, in a sandbox, what it imports
# there (sandbox, refusals). Importing any kb_eval.isolation module runs the package's
# __init__, which loads the parent's side of the package too (oneshot, server, spares,
# handle, forkserver, procs, outcome): stdlib only, and no candidate task calls them.
ENTRY = ["kb_eval", "kb_eval.isolation", "kb_eval.isolation.child",
         "kb_eval.isolation.forkserver", "kb_eval.isolation.handle",
         "kb_eval.isolation.oneshot", "kb_eval.isolation.outcome", "kb_eval.isolation.procs",
         "kb_eval.isolation.refusals", "kb_eval.isolation.sandbox",
         "kb_eval.isolation.server", "kb_eval.isolation.spares"]
RUN_CHILD = sorted(ENTRY + [
    "kb_eval.clocks", "kb_eval.devlock", "kb_eval.errors", "kb_eval.faults", "kb_eval.harness",
    "kb_eval.inputs", "kb_eval.problems", "kb_eval.profile", "kb_eval.profile.launches",
    "kb_eval.timing", "kb_eval.timing_plan",
    "kb_eval.eval", "kb_eval.eval.child", "kb_eval.eval.child.baton",
    "kb_eval.eval.child.calls", "kb_eval.eval.child.compiles", "kb_eval.eval.child.gate",
    "kb_eval.eval.child.integrity", "kb_eval.eval.child.observe", "kb_eval.eval.child.paired",
    "kb_eval.eval.child.probes", "kb_eval.eval.child.rechecks", "kb_eval.eval.child.steps",
    "kb_eval.eval.child.threads", "kb_eval.eval.child.worker",
    "kb_eval.eval.wire", "kb_eval.eval.wire.device", "kb_eval.eval.wire.labels",
    "kb_eval.eval.wire.outputs", "kb_eval.eval.wire.protocol"])
# child.compiles (and what it needs: clocks, devlock, faults, steps) tells torch's build
# code the truth while the candidate is told a GPU is there (first_call_task.gpu_in_sight).
BUILD_CHILD = sorted(ENTRY + [
    "kb_eval.clocks", "kb_eval.devlock", "kb_eval.errors", "kb_eval.faults",
    "kb_eval.inputs", "kb_eval.problems",
    "kb_eval.eval", "kb_eval.eval.child", "kb_eval.eval.child.baton",
    "kb_eval.eval.child.build_task", "kb_eval.eval.child.compiles",
    "kb_eval.eval.child.first_call_task", "kb_eval.eval.child.steps"])
# Never where candidate code runs: the main process's and the trusted side's packages.
PARENT_ONLY = ("kb_eval.eval.schedule", "kb_eval.eval.judge", "kb_eval.inference",
               "kb_eval.run", "kb_eval.report", "kb_eval.cli", "kb_eval.eval.api",
               "kb_eval.eval.cli", "kb_eval.eval.config")

PROBLEM = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x + 1
def get_inputs():
    return [torch.randn(4)]
def get_init_inputs():
    return []
"""
SOURCE = PROBLEM.replace("class Model", "class ModelNew")

def loaded(code: str, tmp_path: Path) -> list[str]:
    """The kb_eval modules a fresh interpreter holds after `code`."""
    script = code + textwrap.dedent("""
        import json, sys
        print(json.dumps(sorted(m for m in sys.modules
                                if m == "kb_eval" or m.startswith("kb_eval."))))
        """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _foreign(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(PARENT_ONLY)]


def test_a_run_child_imports_exactly_its_list(tmp_path):
    modules = loaded("import kb_eval.isolation.child, kb_eval.eval.child.worker\n"
                     "import kb_eval.isolation.refusals, kb_eval.isolation.sandbox\n",
                     tmp_path)
    assert not _foreign(modules)
    assert modules == RUN_CHILD


def test_a_build_child_imports_exactly_its_list(tmp_path):
    """Loaded as a spare loads it, then both tasks run through the child's own task
    path: what their functions import on the way counts too."""
    tasks = []
    for i, (target, payload) in enumerate((
            ("kb_eval.eval.child.build_task:build_candidate", {"source": SOURCE}),
            ("kb_eval.eval.child.build_task:call_on_meta",
             {"source": SOURCE, "problem_code": PROBLEM, "precision": "fp32"}))):
        work = tmp_path / f"task{i}"
        work.mkdir()
        tasks.append({"target": target, "workdir": str(work),
                      "result_path": str(work / "result.json"),
                      "payload": {**payload, "extensions_dir": str(tmp_path / "ext")}})
    code = ("import kb_eval.isolation.child, kb_eval.eval.child.build_task\n"
            "import kb_eval.isolation.refusals, kb_eval.isolation.sandbox\n"
            "from kb_eval.isolation.child import run_task\n"
            f"for task in {tasks!r}:\n    run_task(task)\n")
    modules = loaded(code, tmp_path)
    for task in tasks:
        message = json.loads(Path(task["result_path"]).read_text())
        assert message["ok"] and message["result"]["status"] == "ok", message
    assert not _foreign(modules)
    assert modules == BUILD_CHILD


def test_the_builder_runs_the_build_childs_functions():
    """The targets the parent names are the functions listed above, in one module (so
    that a lazy compile's child is one of the builds' spares)."""
    from kb_eval.eval.schedule.build import BUILD_TARGET, FIRST_CALL_TARGET

    assert BUILD_TARGET == "kb_eval.eval.child.build_task:build_candidate"
    assert FIRST_CALL_TARGET == "kb_eval.eval.child.build_task:call_on_meta"
