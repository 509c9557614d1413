"""Code that runs inside a candidate's processes: its run child (worker.py) and its build
children (build_task.py, first_call_task.py); the per-call checks also run in the
reference server the same way. Nothing here may import kb_eval.eval.judge or
kb_eval.eval.schedule: a candidate's process must hold nothing the judge uses to decide
(tests/test_layout.py enforces it; tests/test_trust_boundary.py lists what they hold)."""
