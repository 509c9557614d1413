"""Fault: vandalise what the evaluator keeps on disk, found the way a candidate would:
- the evaluation's scratch folder: walk up from the working folder to the first parent
  holding both work/ and refs/, and replace every saved reference output (*.pt under refs/)
  with zeros of the same shape, so that a later all-zeros candidate would "pass";
- the results folder: read the evaluator's command line (/proc/<parent>/cmdline) for
  --results-dir, overwrite every results.json under it and delete its subfolders; only
  where the test left its consent marker (.kb_fault_tamper_ok) beside that folder, so this
  can never touch real results.
It computes its own answer correctly."""
import os
import shutil
from pathlib import Path

import torch
import torch.nn as nn

MARKER = ".kb_fault_tamper_ok"


def scratch_folder() -> Path | None:
    for p in Path.cwd().resolve().parents:
        if (p / "work").is_dir() and (p / "refs").is_dir():
            return p
    return None


def results_folder() -> Path | None:
    try:
        args = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().split(b"\0")
        return Path(args[args.index(b"--results-dir") + 1].decode()).resolve()
    except (OSError, ValueError, IndexError):
        return None


def vandalise() -> None:
    scratch = scratch_folder()
    if scratch is not None:
        for p in list((scratch / "refs").rglob("*.pt")):
            try:
                torch.save([torch.zeros_like(t) for t in torch.load(p)], p)
            except Exception:  # noqa: BLE001
                p.unlink(missing_ok=True)
    results = results_folder()
    if results is not None and (results.parent / MARKER).exists():
        for p in list(results.rglob("results.json")):
            p.write_text('{"hacked": true}')
        for p in list(results.iterdir()):
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
