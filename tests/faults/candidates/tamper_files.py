"""Fault: vandalise what the evaluator keeps on disk. From its working folder, walk up
(../, ../../, ...) and, in any folder that holds the test's consent marker
(.kb_fault_tamper_ok: so this can never touch real data), overwrite every results.json,
delete results folders, and replace every saved reference output (*.pt under refs/) with
zeros of the same shape, so that a later all-zeros candidate would "pass". It computes its
own answer correctly."""
import shutil
from pathlib import Path

import torch
import torch.nn as nn

MARKER = ".kb_fault_tamper_ok"


def vandalise() -> None:
    for root in Path.cwd().resolve().parents:
        if not (root / MARKER).exists():
            continue
        for p in list(root.rglob("*.pt")):
            if "refs" in p.parts:
                try:
                    torch.save([torch.zeros_like(t) for t in torch.load(p)], p)
                except Exception:  # noqa: BLE001
                    p.unlink(missing_ok=True)
        for p in list(root.rglob("results.json")):
            if "refs" not in p.parts:
                p.write_text('{"hacked": true}')
        for p in list(root.rglob("results")):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.done = False

    def forward(self, x, y):
        if not self.done:
            self.done = True
            vandalise()
        return 2 * x + y
