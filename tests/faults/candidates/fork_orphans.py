"""Fault: leave processes behind that outlive the worker: a plain fork (same process
group), a setsid'ed child (own session, survives a process-group kill) and a double-forked
setsid'ed grandchild (re-parented once its parent exits). Each sleeps for ten minutes with
the test's token in its command line; the candidate itself answers correctly."""
import os
import subprocess
import sys

import torch.nn as nn

TOKEN = os.environ.get("KB_EVAL_FAULT_TOKEN", "none")
SLEEPER = f"import time; time.sleep(600)  # {TOKEN}"


def spawn_all() -> None:
    if os.fork() == 0:  # plain fork
        os.execv(sys.executable, [sys.executable, "-c", SLEEPER])
    subprocess.Popen([sys.executable, "-c", SLEEPER], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if os.fork() == 0:  # double fork, setsid in between
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", SLEEPER])
        os._exit(0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.spawned = False

    def forward(self, x, y):
        if not self.spawned:
            self.spawned = True
            spawn_all()
        return 2 * x + y
