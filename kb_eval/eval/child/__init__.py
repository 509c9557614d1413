"""Code that runs inside a candidate's process (and, for the per-call checks, in the
reference server the same way). Nothing here may import kb_eval.eval.judge: a candidate's
process must hold nothing the judge uses to decide (tests/test_layout.py enforces it)."""
