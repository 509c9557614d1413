import sys

from kb_eval.eval.cli import entry

sys.exit(entry())
