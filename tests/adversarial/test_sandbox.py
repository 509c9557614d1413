"""The sandbox suite: candidates of our own writing that attack the evaluator itself (its
files, its process, the user's secrets, the network, other processes' memory), evaluated
in one CLI run beside an honest kernel. Each attack must do no harm, the run must finish,
the honest sample's verdict must not change, and the attacker's record must carry a
`sandbox_refused` flag naming what it tried."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest

from adversarial.evalrun import REPO, run_eval

pytestmark = pytest.mark.slow

ATTACKS = Path(__file__).resolve().parent / "sandbox"
HONEST = REPO / "tests" / "candidates" / "cpp" / "level1_problem1_sample0.py"
SECRET = "sk-kbeval-test-0123456789abcdef"
# attack file -> what its refusal flag must name
REFUSED = {"baseline_edit.py": "write", "results_edit.py": "write",
           "cache_poison.py": "write", "signals.py": "signal", "environ_scan.py": "environ",
           "connect_out.py": "connect", "ptrace_attach.py": "ptrace"}


class Listener:
    """A TCP listener on 127.0.0.1 that counts the connections it accepts."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port, self.accepted, self.stop = self.sock.getsockname()[1], 0, False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self):
        self.stop = True
        self.thread.join(2)
        self.sock.close()


@pytest.fixture(scope="module")
def attacked(tmp_path_factory, build_cache_dir):
    root = tmp_path_factory.mktemp("sandbox_attacks")
    results, cache = root / "results", build_cache_dir  # the suite's builds, reused
    baseline = results / "baseline" / "cpu" / "adversarial" / "fp32.json"
    baseline.parent.mkdir(parents=True)
    baseline.write_text(json.dumps({"records": {"level1/1": {"timing": {"median_ms": 1.0}}}}))
    victim = cache / "builds" / f"victim_entry_{os.getpid()}" / "kb_build.json"
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_text('{"status": "ok"}')
    front = cache / "pch" / "bin" / "kb-pch-g++"
    listener = Listener()
    values = {"baseline": baseline, "results_dir": results / "suite" / "r1",
              "victim": victim, "front": front, "secret": SECRET, "port": listener.port,
              "evaluator": os.getpid()}
    entries = [("honest", "level1/1", HONEST)]
    for name in REFUSED:
        path = root / "candidates" / name
        path.parent.mkdir(exist_ok=True)
        text = (ATTACKS / name).read_text()
        for key, value in values.items():  # the attacker knows every path and pid
            text = text.replace("{" + key + "}", str(value))
        path.write_text(text)
        entries.append((name, "level1/1", path))
    before = {p: p.read_bytes() for p in (baseline, victim)}
    try:
        proc, records, path = run_eval(
            entries, backend="cpp", results_dir=results, cache_dir=cache,
            args=("--trials", "5", "--jobs", "2"),
            settings=dict(warmup=1, correct_trials=3, run_timeout_s=90),
            env={"OPENAI_API_KEY": SECRET, "DEEPSEEK_API_KEY": SECRET})
    finally:
        listener.close()
    front_text = front.read_text() if front.exists() else ""
    return dict(proc=proc, records=records, path=path, before=before, listener=listener,
                front_text=front_text)


def test_the_run_finishes_and_every_sample_is_recorded(attacked):
    proc = attacked["proc"]
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert set(attacked["records"]) == {"honest", *REFUSED}


def test_the_honest_sample_keeps_its_verdict(attacked):
    r = attacked["records"]["honest"]
    assert r["status"] == "correct" and r["correct"], r
    assert r["flags"] == [] and r["sandbox"] is True


@pytest.mark.parametrize("attack", sorted(REFUSED))
def test_each_attack_is_flagged_with_what_was_refused(attacked, attack):
    r = attacked["records"][attack]
    flags = [f for f in r["flags"] if f["code"] == "sandbox_refused"]
    assert flags, (r["status"], r.get("error"), r["flags"])
    assert REFUSED[attack] in flags[0]["message"], flags[0]["message"]
    assert flags[0]["severity"] == "error"  # never counted as a win


def test_no_file_of_the_evaluator_changed(attacked):
    for path, text in attacked["before"].items():
        assert path.read_bytes() == text, path
    assert "pwned" not in attacked["front_text"]
    results_dir = attacked["path"].parent
    assert not (results_dir / "planted.txt").exists()
    json.loads(attacked["path"].read_text())  # still the evaluator's own file


def test_no_secret_no_connection_no_trace(attacked):
    assert SECRET not in attacked["path"].read_text()
    assert attacked["listener"].accepted == 0
    r = attacked["records"]["ptrace_attach.py"]
    assert "attack went through" not in (r.get("error") or ""), r.get("error")
    assert attacked["records"]["environ_scan.py"]["status"] == "correct"
