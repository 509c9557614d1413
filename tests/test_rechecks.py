"""Re-checks of timed calls (eval/child/rechecks.py): what the timing step leaves for
after it is judged as when it was done at once: late writes, mutated inputs, the values
saved; a reused output buffer is not a late write."""

from __future__ import annotations

import pytest
import torch

from kb_eval.eval.child import probes, rechecks as rc


def draw(seed: int) -> list:
    return [torch.full((64,), float(seed)), 3]


def make(monkeypatch, defer_bytes: int):
    monkeypatch.setattr(rc, "DEFER_BYTES", defer_bytes)
    saved: dict[str, list] = {}
    seen: dict[str, dict] = {}
    r = rc.Rechecks(torch.device("cpu"), lambda label, ts: saved.setdefault(label, [
        t.clone() for t in ts]), draw, seen)
    return r, saved, seen


def call(r: rc.Rechecks, out: torch.Tensor, label: str | None = None, seed: int = 7,
         inputs: list | None = None) -> torch.Tensor:
    """One timed call's return as worker.py reports it (picked when `label` is given)."""
    r.returned(out)
    if label:
        r.take(label, [out], seed, inputs if inputs is not None else draw(seed))
    return out


@pytest.mark.parametrize("defer_bytes", [1 << 20, 0], ids=["later", "at_once"])
def test_an_honest_call_is_clean_and_its_output_saved(monkeypatch, defer_bytes):
    r, saved, seen = make(monkeypatch, defer_bytes)
    call(r, draw(7)[0] * 2, "timing_1")
    assert bool(r.later) == (defer_bytes > 0) and bool(r.settling) == (defer_bytes == 0)
    r.finish()
    assert seen["timing_1"] == {"aliased": [], "devices": ["cpu"], "mutated": [],
                                "unsettled": False}
    assert torch.equal(saved["timing_1"][0], torch.full((64,), 14.0))


def test_a_write_after_the_call_returned_is_seen_and_not_saved(monkeypatch):
    """Left for later, a late write has until the end of the timing step to show (at
    once, the 10 ms wait of probes.settled: tests/adversarial's late threads)."""
    r, saved, seen = make(monkeypatch, 1 << 20)
    out = call(r, torch.zeros(64), "timing_1")  # returned before its thread filled it
    out.fill_(14.0)  # the thread's write lands during the next timed calls
    call(r, torch.ones(64))  # the next call returns a tensor of its own
    r.finish()
    assert seen["timing_1"]["unsettled"] is True
    assert torch.equal(saved["timing_1"][0], torch.zeros(64))  # what the call returned


def test_an_output_buffer_the_next_call_reuses_is_no_late_write(monkeypatch):
    r, saved, seen = make(monkeypatch, 1 << 20)
    buffer = torch.empty(64)
    call(r, buffer.fill_(14.0), "timing_1")
    call(r, buffer.fill_(16.0))  # the candidate's next call writes and returns it again
    r.finish()
    assert seen["timing_1"]["unsettled"] is False
    assert torch.equal(saved["timing_1"][0], torch.full((64,), 14.0))


@pytest.mark.parametrize("defer_bytes", [1 << 20, 0], ids=["later", "at_once"])
def test_mutated_inputs_are_seen_though_the_next_call_reuses_them(monkeypatch, defer_bytes):
    r, saved, seen = make(monkeypatch, defer_bytes)
    inputs = draw(7)
    inputs[0][3] = -1.0  # the call wrote into its input
    call(r, inputs[0] + 1, "timing_1", inputs=inputs)
    inputs[0].copy_(draw(9)[0])  # the next timed call's values, at the same addresses
    r.finish()
    assert seen["timing_1"]["mutated"] == [0]


def test_an_output_aliasing_its_input_is_rechecked_at_once(monkeypatch):
    """The next call's inputs are drawn into the same buffers: left for later, such an
    output would look rewritten."""
    r, saved, seen = make(monkeypatch, 1 << 20)
    inputs = draw(2)
    call(r, inputs[0], "timing_1", seed=2, inputs=inputs)  # returns its input itself
    assert not r.later
    inputs[0].copy_(draw(5)[0])
    r.finish()
    assert seen["timing_1"]["aliased"] and seen["timing_1"]["unsettled"] is False
    assert torch.equal(saved["timing_1"][0], torch.full((64,), 2.0))


def test_outputs_beyond_the_budget_are_saved_at_once_and_settle_beside_the_timing(
        monkeypatch):
    """Beyond the budget a re-check is saved and its inputs checked at once; its output
    is kept and looked at again after a later call, once its wait is over."""
    r, saved, seen = make(monkeypatch, 4 * 64 * 4)  # one output, its copy and its input
    monkeypatch.setattr(rc, "SETTLE_S", 0.0)  # every wait over by the next return
    call(r, draw(1)[0] * 2, "timing_1", seed=1)
    call(r, draw(1)[0] * 3, "timing_2", seed=1)
    assert [x.label for x in r.later] == ["timing_1"]
    assert r.settling.label == "timing_2" and "timing_2" in saved and "timing_2" not in seen
    call(r, torch.ones(64))  # a later call returns: the wait is over
    assert r.settling is None
    assert seen["timing_2"] == {"aliased": [], "devices": ["cpu"], "mutated": [],
                                "unsettled": False}
    r.finish()
    assert not r.later and r.kept == 0
    assert set(saved) == {"timing_1", "timing_2"}
    assert torch.equal(saved["timing_2"][0], torch.full((64,), 3.0))


@pytest.mark.parametrize("snapshot_max", [1 << 20, 0], ids=["copied", "fingerprinted"])
def test_a_late_write_to_a_settling_output_is_seen_and_not_saved(monkeypatch, snapshot_max):
    r, saved, seen = make(monkeypatch, 0)
    monkeypatch.setattr(probes, "SNAPSHOT_MAX_BYTES", snapshot_max)
    out = call(r, torch.zeros(64), "timing_1")
    out.fill_(14.0)  # the candidate's thread writes after the call returned
    call(r, torch.ones(64))
    r.finish()
    assert seen["timing_1"]["unsettled"] is True
    assert torch.equal(saved["timing_1"][0], torch.zeros(64))


def test_a_settling_output_saved_on_the_device_is_compared_with_its_saved_bytes(
        monkeypatch):
    """Saved into the server's buffer (a CPU tensor stands in for it), a settling output
    keeps no copy or fingerprint of its own: the saved bytes are what it is compared
    with."""
    monkeypatch.setattr(probes, "SNAPSHOT_MAX_BYTES", 0)  # no copy: fingerprints, if any
    monkeypatch.setattr(probes, "fingerprints", None)  # never called on this path
    seen: dict[str, dict] = {}
    buffers: dict[str, list] = {}

    def save(label, ts):
        buffers[label] = [t.reshape(-1).view(torch.uint8).clone() for t in ts]
        return buffers[label]

    r = rc.Rechecks(torch.device("cpu"), save, draw, seen, lambda ts: True)
    monkeypatch.setattr(rc, "DEFER_BYTES", 0)
    call(r, torch.full((64,), 3.0), "timing_1")
    late = call(r, torch.zeros(64), "timing_2")  # ends timing_1's wait
    late.fill_(14.0)
    r.finish()
    assert seen["timing_1"]["unsettled"] is False and seen["timing_2"]["unsettled"] is True
    assert buffers["timing_2"][0].view(torch.float32).sum() == 0


def test_a_reused_buffer_is_no_late_write_while_settling(monkeypatch):
    r, saved, seen = make(monkeypatch, 0)
    buffer = torch.empty(64)
    call(r, buffer.fill_(14.0), "timing_1")
    call(r, buffer.fill_(16.0))  # the next call writes and returns the same storage
    r.finish()
    assert seen["timing_1"]["unsettled"] is False
    assert torch.equal(saved["timing_1"][0], torch.full((64,), 14.0))


def test_one_output_settles_at_a_time(monkeypatch):
    """A second re-check beyond the budget ends the first one's wait (slept out)."""
    r, saved, seen = make(monkeypatch, 0)
    call(r, torch.full((64,), 1.0), "timing_1")
    call(r, torch.full((64,), 2.0), "timing_2")
    assert r.settling.label == "timing_2" and seen["timing_1"]["unsettled"] is False
    r.finish()
    assert seen["timing_2"]["unsettled"] is False


def test_outputs_too_large_to_keep_wait_at_once(monkeypatch):
    r, saved, seen = make(monkeypatch, 0)
    monkeypatch.setattr(rc, "SETTLING_MAX_BYTES", 64 * 4 - 1)
    call(r, draw(1)[0] * 2, "timing_1", seed=1)
    assert r.settling is None and seen["timing_1"]["unsettled"] is False
    assert "timing_1" in saved


def test_outputs_without_storage_are_no_error(monkeypatch):
    """A sparse output has no storage to tell reuse by: noted as nothing, never raised."""
    r, saved, seen = make(monkeypatch, 1 << 20)
    call(r, draw(7)[0] * 2, "timing_1")
    r.returned(torch.eye(4).to_sparse())
    r.finish()
    assert seen["timing_1"]["unsettled"] is False
