"""Code that runs inside a candidate's processes (run and build children). Nothing here may
import kb_eval.eval.judge or kb_eval.eval.schedule (tests/test_layout.py)."""
