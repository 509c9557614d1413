"""Print one Markdown table of every profile.json under a folder (python -m kb_eval.profile
--out): per configuration, time per forward, the share of each category, kernel launches
and aten calls. Used by benchmarks/profile_tvm_gpu.sh for the issue's closing note.

    python benchmarks/profile_summary.py results/profile
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kb_eval.profile.categories import CATEGORIES
from kb_eval.report.tables import markdown_table


def rows(folder: Path) -> list[dict]:
    out = []
    for path in sorted(folder.glob("*/profile.json")):
        doc = json.loads(path.read_text())
        shares = doc["category_share_pct"]
        out.append({"configuration": doc["config"]["label"],
                    "ms/forward": f"{doc['total_ms']:.4g} ({doc['time_kind']})",
                    **{c: f"{shares.get(c, 0.0):.1f} %" for c in CATEGORIES},
                    "kernel launches": f"{doc['kernel_launches']:g}",
                    "aten calls": f"{doc['aten_calls']:g}"})
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python benchmarks/profile_summary.py PROFILE_OUT_DIR", file=sys.stderr)
        return 2
    table = rows(Path(argv[0]))
    if not table:
        print(f"no */profile.json under {argv[0]}", file=sys.stderr)
        return 2
    print(markdown_table(table))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
