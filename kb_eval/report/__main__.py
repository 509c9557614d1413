import sys

from kb_eval.cli import run_cli
from kb_eval.report.cli import main

sys.exit(run_cli(main))
