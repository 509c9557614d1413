"""What the physical floor needs, and which hold of the device's lock it takes (real
reference server, CPU): a problem's own figures come with its first comparison, which holds
the device shared like any untimed work; the device's figures (an empty call's time, a
copy's bandwidth) are timed, so they are taken once per device, with the device alone."""

from __future__ import annotations

import threading

from kb_eval.devlock import DeviceLock
from kb_eval.eval.config import EvalConfig
from kb_eval.eval.judge.references import ReferenceStore
from kb_eval.eval.schedule.context import EvalContext
from kb_eval.problems import Problem

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * {scale}


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return []
'''


def _problem(i: int) -> Problem:
    return Problem(source="floor-test", level=1, problem_id=i, name=f"Scale{i}",
                   code=PROBLEM.format(scale=i + 1))


def _compare_in_thread(store, problem, folder) -> threading.Event:
    done = threading.Event()

    def run():
        store.compare(problem, ["correct_0"], folder, "cpu")
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done


def test_first_comparisons_share_the_device_and_its_floor_is_timed_alone(tmp_path):
    ctx = EvalContext.create(EvalConfig(backend="cpp", results_dir=tmp_path))
    store = ReferenceStore(ctx)
    neighbour = DeviceLock(ctx.lock_path("cpu"))  # a child's untimed work, say
    folder = tmp_path / "outputs"  # no candidate files: each label's diff says so
    folder.mkdir()
    try:
        # The run's first comparison also wants the device's figures: timed, so they
        # wait for the neighbour to let go.
        neighbour.acquire("shared")
        first = _compare_in_thread(store, _problem(1), folder)
        assert not first.wait(3), "the device's floor was timed beside other work"
        neighbour.release()
        assert first.wait(120)
        metrics = store._state(_problem(1)).metrics
        assert metrics["empty_call_ms"] > 0 and metrics["in_bytes"] == 64 * 32 * 4, metrics

        # Another problem's first comparison measures its own figures beside the
        # neighbour, and takes the device's from the first measure.
        neighbour.acquire("shared")
        second = _compare_in_thread(store, _problem(2), folder)
        assert second.wait(120), "a problem's first comparison waited for the device alone"
        other = store._state(_problem(2)).metrics
        assert other["empty_call_ms"] == metrics["empty_call_ms"]
        assert other["out_bytes"] == 64 * 32 * 4 and "copy_bytes_per_s" in other
    finally:
        neighbour.release()
        store.close()
