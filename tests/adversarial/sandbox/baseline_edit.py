"""Attack: find the evaluator through /proc, then multiply every median of a baseline
file by 10, so that every later speedup on this machine is inflated."""
import json
import os

import torch.nn as nn

TARGET = "{baseline}"


def _evaluator_args():
    """Command lines of kb_eval processes above us (what a real attacker walks)."""
    found, pid = [], os.getppid()
    while pid > 1:
        try:
            found.append(open(f"/proc/{pid}/cmdline").read())
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    return found


def _inflate(path):
    try:
        data = json.load(open(path))
    except OSError:  # unreadable: write a forged file blind
        data = {"records": {"level1/1": {"timing": {"median_ms": 1.0}}}}
    for record in data.get("records", {}).values():
        record["timing"]["median_ms"] *= 10
    with open(path, "w") as f:
        json.dump(data, f)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        _evaluator_args()
        try:
            _inflate(TARGET)
        except OSError:
            pass

    def forward(self, x, y):
        return 2 * x + y
