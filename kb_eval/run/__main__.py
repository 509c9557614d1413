"""`python -m kb_eval.run`: see kb_eval.run."""

import sys

from kb_eval.run.command import entry

if __name__ == "__main__":
    sys.exit(entry())
