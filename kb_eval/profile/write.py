"""Report writing: profile.json (what the child measured, plus shares) and report.md per
configuration; compare.json / compare.md for a reference beside a candidate."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kb_eval.profile.categories import CATEGORIES
from kb_eval.report.tables import markdown_table
from kb_eval.report.text import cut
from kb_eval.results import write_json_atomic

TOP_OPS = 15
LAUNCH_KEYS = ("kernel_launches", "aten_calls", "top_aten_calls")  # profile/launches.py


def op_frame(profile: dict) -> pd.DataFrame:
    """The aten operators by self time, with their share of the forward's total."""
    df = pd.DataFrame(profile["ops"], columns=["op", "category", "calls", "self_ms",
                                               "total_ms", "self_cpu_ms", "kernels"])
    total = profile["total_ms"] or float("nan")
    df["share_pct"] = 100 * df["self_ms"] / total
    return df.sort_values("self_ms", ascending=False, ignore_index=True)


def category_frame(profile: dict) -> pd.DataFrame:
    cats = pd.Series(profile["categories"], dtype=float).reindex(CATEGORIES, fill_value=0.0)
    total = cats.sum() or float("nan")
    return pd.DataFrame({"category": cats.index, "ms": cats.values,
                         "share_pct": 100 * cats.values / total})


def write_profile(out_dir: Path, config: dict, profile: dict) -> dict:
    """profile.json and report.md in out_dir (trace.json is already there)."""
    ops = op_frame(profile)
    cats = category_frame(profile)
    doc = {"config": config, **{k: v for k, v in profile.items() if k != "ops"},
           "category_share_pct": dict(zip(cats["category"], cats["share_pct"].round(3))),
           "top_ops": ops.head(TOP_OPS).round(6).to_dict(orient="records"),
           "ops": ops.round(6).to_dict(orient="records")}
    write_json_atomic(out_dir / "profile.json", doc)
    (out_dir / "report.md").write_text(_report_md(config, profile, ops, cats), encoding="utf-8")
    return doc


def _report_md(config: dict, profile: dict, ops: pd.DataFrame, cats: pd.DataFrame) -> str:
    what = "device (CUDA kernel)" if profile["time_kind"] == "device" else "CPU"
    lines = [f"# Profile: {config['label']}", "",
             f"- subject: {config['subject']}", f"- device: {config['device']}, "
             f"precision: {config['precision']}, forwards profiled: {profile['steps']}",
             f"- {what} time per forward: {profile['total_ms']:.4g} ms "
             f"(host wall time per forward: {profile['wall_ms']:.4g} ms)",
             f"- kernel launches per forward: {profile['kernel_launches']:g} "
             f"(+ {profile['memory_activities']:g} memcpy/memset); aten operator calls: "
             f"{profile['aten_calls']:g} ({profile['top_aten_calls']:g} outermost)", "",
             "## Time by category", ""]
    lines.append(markdown_table([{"category": r.category, "ms": f"{r.ms:.4g}",
                                  "share": f"{r.share_pct:.1f} %"}
                                 for r in cats.itertuples()]))
    lines += ["", f"## Top aten operators (by self {what} time)", ""]
    lines.append(markdown_table([_op_cells(r) for r in ops.head(TOP_OPS).itertuples()])
                 or "(none)")
    lines += ["", "Chrome trace: trace.json (chrome://tracing or ui.perfetto.dev).", ""]
    return "\n".join(lines)


def _op_cells(r) -> dict:
    kernels = ", ".join(f"{cut(k, 60)} ×{n:g}" for k, n in list(r.kernels.items())[:3])
    return {"operator": r.op, "category": r.category, "calls": f"{r.calls:g}",
            "self ms": f"{r.self_ms:.4g}", "total ms": f"{r.total_ms:.4g}",
            "share": f"{r.share_pct:.1f} %", "kernels": kernels or "-"}


def write_compare(out_dir: Path, label: str, reference: dict, candidate: dict) -> dict:
    """Per-category time and launches, reference beside candidate."""
    ref, cand = category_frame(reference), category_frame(candidate)
    table = pd.DataFrame({"category": CATEGORIES, "reference_ms": ref["ms"].values,
                          "candidate_ms": cand["ms"].values})
    rows = table.to_dict(orient="records")
    totals = {name: {"total_ms": p["total_ms"], "wall_ms": p["wall_ms"],
                     **{k: p[k] for k in LAUNCH_KEYS}}
              for name, p in (("reference", reference), ("candidate", candidate))}
    doc = {"label": label, "time_kind": reference["time_kind"], "categories": rows, **totals}
    write_json_atomic(out_dir / "compare.json", doc)
    md = [f"# Reference vs candidate: {label}", "", markdown_table(
        [{"category": r["category"], "reference ms": f"{r['reference_ms']:.4g}",
          "candidate ms": f"{r['candidate_ms']:.4g}"} for r in rows]
        + [{"category": f"**total** ({reference['time_kind']})",
            "reference ms": f"{reference['total_ms']:.4g}",
            "candidate ms": f"{candidate['total_ms']:.4g}"}]), "", markdown_table(
        [{"per forward": k, "reference": f"{totals['reference'][k]:g}",
          "candidate": f"{totals['candidate'][k]:g}"}
         for k in (*LAUNCH_KEYS, "wall_ms")]), ""]
    (out_dir / "compare.md").write_text("\n".join(md), encoding="utf-8")
    return doc
