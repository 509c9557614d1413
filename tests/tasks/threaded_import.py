"""A module whose import starts a thread: a zygote asked to preload it must refuse to fork
from then on (tests/test_forkserver.py)."""
import threading
import time

threading.Thread(target=time.sleep, args=(120,), daemon=True).start()


def hello(payload, workdir):
    import sys
    return {"cmdline": open("/proc/self/cmdline").read().replace("\0", " "),
            "argv": sys.argv}
