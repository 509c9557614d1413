"""The typed process boundary: a results record declares every field (an unknown one is
refused, a retired one dropped on read), and the reference server's messages are models
whose malformed instances are refused with a line that names the field."""

from __future__ import annotations

import json

import pytest

from kb_eval import results
from kb_eval.errors import UserError
from kb_eval.eval.wire import reference as wire
from kb_eval.eval.wire.protocol import PairedTiming
from kb_eval.results import STATUSES, SampleRecord


def test_a_record_with_an_unknown_field_is_refused():
    with pytest.raises(ValueError, match="speedup_countd"):
        SampleRecord.model_validate({"key": "k", "speedup_countd": True})
    record = SampleRecord(key="k")
    with pytest.raises(ValueError):
        record.speedup_countd = True
    with pytest.raises(ValueError):
        record.status = "not_a_status"


@pytest.mark.parametrize("status", STATUSES)
def test_every_status_round_trips(status):
    record = SampleRecord(key="k", status=status)
    assert SampleRecord.model_validate_json(record.model_dump_json()).status == status


def test_the_fields_set_outside_the_constructor_are_declared():
    record = SampleRecord(key="k")
    record.speedup_counted, record.lane, record.requeued = True, "n/cuda:0", ["lost"]
    record.attempts, record.code_path, record.prompt_tokens = 2, "code/x.py", 10
    back = SampleRecord.model_validate_json(record.model_dump_json())
    assert (back.lane, back.requeued, back.attempts, back.prompt_tokens) == (
        "n/cuda:0", ["lost"], 2, 10)


def _old_run_file(tmp_path, record: dict):
    from kb_eval.timing import TimingSettings

    run = {"kind": "run", "produced_by": {"tool": "kb_eval.eval"},
           "hardware": {"device": "cpu", "name": "cpu", "slug": "cpu", "torch_version": "0"},
           "precision": "fp32", "timing": TimingSettings().model_dump(), "samples": [record]}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(run))
    return path


def test_an_old_results_file_with_a_retired_key_still_loads(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RETIRED_FIELDS", frozenset({"old_note"}))
    path = _old_run_file(tmp_path, {"key": "k", "status": "correct", "old_note": "x",
                                    "speedup_counted": True, "lane": "n/cuda:0"})
    run = results.read_model(path, results.RunFile)
    (record,) = run.samples
    assert record.status == "correct" and record.speedup_counted is True
    assert "old_note" not in record.model_dump()


def test_an_unknown_key_in_a_results_file_is_a_one_line_error(tmp_path):
    path = _old_run_file(tmp_path, {"key": "k", "mystery": 1})
    with pytest.raises(UserError, match=r"samples\.0\.mystery"):
        results.read_model(path, results.RunFile)


def _compare(**changes) -> dict:
    payload = {"problem_code": "x", "device": "cpu", "precision": "fp32", "seed": 1,
               "labels": [["correct", 0], ["timing", 3, 77]],
               "compare": {"folder": "/tmp/f", "atol": None, "rtol": None}}
    return {**payload, **changes}


def test_requests_are_read_as_their_kind():
    assert isinstance(wire.parse_request(_compare()), wire.CompareRequest)
    assert isinstance(wire.parse_request({"plan": True, "problem_code": "x", "device": "cpu",
                                          "precision": "fp32"}), wire.PlanRequest)
    assert isinstance(wire.parse_request({"exchange_free": "k", "device": "cpu"}),
                      wire.FreeRequest)
    sent = wire.CompareRequest.model_validate(_compare()).model_dump()
    assert isinstance(wire.parse_request(json.loads(json.dumps(sent))), wire.CompareRequest)


@pytest.mark.parametrize("payload, field", [
    (_compare(seeds=3), "seeds"),  # a key nobody reads
    (_compare(precision="fp8"), "precision"),
    ({**_compare(), "compare": {"atol": 1e-3}}, "compare.folder"),
    ({"plan": True, "device": "cpu", "precision": "fp32"}, "problem_code"),
    ({"export": {"key": "k", "n": -1, "bytes": 4}, "device": "cpu"}, "export.n"),
    ([1, 2], "not an object"),
])
def test_a_malformed_request_is_refused_with_its_field(payload, field):
    with pytest.raises(wire.MessageError, match=rf"reference server request.*{field}"):
        wire.parse_request(payload)


def test_a_malformed_reply_is_refused_with_its_field():
    with pytest.raises(wire.MessageError, match=r"RoundsReply.*rounds\.0\.ms"):
        wire.parse_reply(wire.RoundsReply, {"rounds": [{"ms": "fast"}]})
    with pytest.raises(wire.MessageError, match=r"CompareReply.*diff"):
        wire.parse_reply(wire.CompareReply, {"diff": {}})
    request = wire.parse_request({"exchange_free": "k", "device": "cpu"})
    with pytest.raises(wire.MessageError, match=r"FreeReply.*handles"):
        wire.checked_reply(request, {"handles": []})
    # an answer keeps only the keys the server set: "error" absent means it went well
    assert wire.parse_reply(wire.PlanReply, None).model_dump(exclude_unset=True) == {}


def test_the_paired_timing_reads_by_key_and_refuses_others():
    paired = PairedTiming(rounds=[[1.0, 2.0]], launch_ms=None)
    assert paired.get("rounds") == [[1.0, 2.0]] and paired.get("error") is None
    assert paired["busy_ms"] == 0.0 and paired.get("ref_spent", {}) == {}
    with pytest.raises(KeyError):
        paired.get("round")
    with pytest.raises(ValueError):
        PairedTiming(rounds=[[1.0]], extra_key=1)
