"""Fault: a host loop that never ends (and ignores SIGTERM and SIGINT)."""
import signal

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        while True:
            pass
