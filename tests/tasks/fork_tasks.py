"""Tasks for tests/test_forkserver.py, run in isolation children (imported there via
PYTHONPATH, never by the tests themselves)."""
import os
import signal
import threading
import time

import torch

IMPORTED_IN = os.getpid()  # the zygote's pid when it imported this module ahead of a fork


def look(payload, workdir):
    """What this child sees of its process and of its siblings' leftovers; then it leaves
    some of its own (a torch attribute, an environment variable, a thread, a file)."""
    fds = {}
    for n in os.listdir("/proc/self/fd"):
        try:
            fds[n] = os.readlink(f"/proc/self/fd/{n}")
        except OSError:
            pass  # the listing's own descriptor, closed by now
    seen = {"mark": getattr(torch, "_kb_mark", None), "env": os.environ.get("KB_LEFT"),
            "threads": len(os.listdir("/proc/self/task"))}
    torch._kb_mark = payload["i"]
    os.environ["KB_LEFT"] = str(payload["i"])
    threading.Thread(target=time.sleep, args=(60,), daemon=False).start()
    return {"pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0),
            "pgid": os.getpgid(0), "fds": fds, "seen": seen,
            "cmdline": open("/proc/self/cmdline").read().replace("\0", " ")}


def segfault(payload, workdir):
    os.kill(os.getpid(), signal.SIGSEGV)


def exit3(payload, workdir):
    os._exit(3)


def hang(payload, workdir):
    time.sleep(600)


def hog(payload, workdir):
    blocks = [bytearray(64 << 20) for _ in range(40)]  # 2.5 GB, touched
    time.sleep(30)
    return {"n": len(blocks)}


def on_cuda(payload, workdir):
    """A CUDA op in a forked child: the zygote never opened CUDA, so the child can."""
    x = torch.arange(1024, device="cuda", dtype=torch.float32)
    return {"sum": float((x * 2).sum().item()), "device": torch.cuda.get_device_name(0),
            "cmdline": open("/proc/self/cmdline").read().replace("\0", " "),
            "imported_in_child": IMPORTED_IN == os.getpid()}


def chain(payload, workdir):
    """As ninja runs a compile: a command in a process group of its own, which starts a
    process of its own (a compiler driver under our compiler front); their pids are
    written to the workdir, then this child hangs until it is killed."""
    import subprocess
    import sys
    from pathlib import Path

    leaf = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(600)']); open(sys.argv[1], 'w').write(str(p.pid)); "
            "time.sleep(600)")
    mid = subprocess.Popen([sys.executable, "-c", leaf, str(Path(workdir) / "leaf.pid")],
                           process_group=0)
    (Path(workdir) / "mid.pid").write_text(str(mid.pid))
    time.sleep(600)
