"""`kb_eval.baseline` stops promptly on Ctrl-C or `kill`: the problem being timed has its
child killed (it sleeps in every call), the problem timed before stays in the file, exit
130 with one line. Before, the stage waited for the running child to finish."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from candidates import eval_kit as kit

pytestmark = pytest.mark.slow

STOP_S = 15.0  # issue 59 asks 5 s; room for a busy 2-core machine (1.8 s measured there)
SLOW = """import os
import time
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        with open({pids!r}, "a") as f:
            f.write(f"{{os.getpid()}}\\n")
        time.sleep(600)
        return x * 2


def get_inputs():
    return [torch.randn(8, 8)]


def get_init_inputs():
    return []
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_baseline_stops_at_once_and_keeps_what_it_timed(tmp_path, sig):
    problems, out, pids = tmp_path / "p" / "level1", tmp_path / "out.json", tmp_path / "pids"
    problems.mkdir(parents=True)
    shutil.copy(kit.PROBLEMS / "level1" / "1_ScaleAdd.py", problems / "1_ScaleAdd.py")
    (problems / "2_Slow.py").write_text(SLOW.format(pids=str(pids)))
    cmd = [sys.executable, "-m", "kb_eval.baseline", "--source", str(problems.parent),
           "--device", "cpu", "--trials", "3", "--output", str(out),
           "--results-dir", str(tmp_path / "res"), "--quiet"]
    proc = subprocess.Popen(cmd, cwd=kit.REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                        signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        while not (pids.exists() and pids.read_text().strip()):  # in the slow one's call
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(sig)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=120)
        stop_s = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted: what was finished is saved" in err
    records = json.loads(out.read_text())["records"]
    assert [k.rsplit("/", 2)[-2:] for k in records] == [["level1", "1"]], list(records)
    assert stop_s < STOP_S, f"baseline took {stop_s:.1f} s to stop"
    time.sleep(0.5)
    assert not any(_alive(int(p)) for p in pids.read_text().split()), "its child lives on"
