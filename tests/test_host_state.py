"""The host's pace probe (kb_eval/host_state.py) must slow down when the host does: a
baseline record's `host_work_ms` is only worth keeping if it tells a core at full speed
from one running at half."""

import os
import signal
import statistics
import subprocess
import sys
import time

from kb_eval.host_state import work_ms


def test_host_work_takes_longer_on_a_shared_core():
    core = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # same core
    alone, shared = [], []
    try:
        time.sleep(0.3)  # the burner's interpreter is up
        for _ in range(3):  # alternate, so that other load on the machine hits both
            burner.send_signal(signal.SIGSTOP)
            alone.append(work_ms(5))
            burner.send_signal(signal.SIGCONT)
            time.sleep(0.02)
            shared.append(work_ms(5))
    finally:
        burner.kill()
        burner.wait()
        os.sched_setaffinity(0, before)
    # one other busy process on the core: about half the CPU, so about twice the time
    assert statistics.median(shared) > 1.3 * statistics.median(alone), (alone, shared)
