"""Fault: leave a process behind that also sheds the sandbox's environment marker
(KB_EVAL_SANDBOX): setsid'ed and exec'ed with an empty environment. The token is in its
command line only."""
import os
import subprocess
import sys

import torch.nn as nn

TOKEN = os.environ.get("KB_EVAL_FAULT_TOKEN", "none")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.spawned = False

    def forward(self, x, y):
        if not self.spawned:
            self.spawned = True
            subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(600)  # {TOKEN}"],
                             env={}, start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        return 2 * x + y
