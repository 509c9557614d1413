"""Trusted: the reference server and the parent's rules that decide a verdict. Nothing here
runs candidate code or imports it; candidates reach the judge only as output files
(kb_eval/eval/wire/outputs.py) and the child's JSON report, both read as data."""
