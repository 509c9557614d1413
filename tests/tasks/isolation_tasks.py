"""Tasks for tests/test_isolation.py, run in isolation children (imported there via
PYTHONPATH, never by the tests themselves)."""
import os
import time

SEEN: list = []  # survives between the tasks of one Server


def remember(payload, workdir):
    SEEN.append(payload["x"])
    return {"seen": list(SEEN), "pid": os.getpid()}


def die(payload, workdir):
    os._exit(3)


def hang(payload, workdir):
    time.sleep(600)


def fail(payload, workdir):
    raise ValueError("no good")


def talk(payload, workdir):
    print("x" * payload["n"], flush=True)
    return {}


def env_var(payload, workdir):
    return {"var": os.environ.get(payload["var"])}


WARMED: list = []


def warm_up():
    """Run by a child's start-up, before its first task (kb_eval/isolation/child.py)."""
    WARMED.append(os.getpid())


def warmed(payload, workdir):
    return {"warmed": list(WARMED), "pid": os.getpid()}


class OutOfMemoryError(RuntimeError):
    """Named as torch's, without importing torch."""


def short_of_memory(payload, workdir):
    raise OutOfMemoryError("no room for 8 GiB")
