"""Speed of light in the report: the sol_p cells, a sample's SOL text, and one roofline
plot per run (base64 PNG).

The roofline: FLOPs per compulsory byte against achieved FLOP/s; filled points are
samples, hollow ones the reference. A problem of no FLOPs stands at the left edge, so its
height against the memory line is still its bandwidth share.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from kb_eval.eval.judge.score import is_correct, sol_p_name
from kb_eval.report.text import last_turns, pct
from kb_eval.results import RunFile, RunSummary, SampleRecord

# Two thresholds in the models table (more would not fit); results.json keeps every one.
TABLE_SOL_COLS = (sol_p_name(0.5), sol_p_name(0.9))
X_MIN = 1 / 16  # FLOP/byte: where problems of no counted FLOPs are drawn
SIZE_IN, DPI = (7.0, 4.2), 90  # fixed: point pixels are computed from it (no tight bbox)
SAMPLE_COLOUR, REFERENCE_COLOUR = "#1f77b4", "#ff7f0e"


def sol_cells(s: RunSummary) -> dict:
    """sol_p cells ("-" for a run from before speed-of-light shares)."""
    return {name: pct(s.sol_p.get(name)) for name in TABLE_SOL_COLS}


def sol_text(r: SampleRecord) -> str:
    """'42% mem (ref 38%)': the sample's share, which side bounds it, the reference's."""
    sol = r.sol
    if sol is None or sol.share is None:
        return "-"
    side = {"compute": " flop", "memory": " mem"}.get(sol.bound or "", "")
    ref = f" (ref {100 * sol.reference_share:.0f}%)" if sol.reference_share else ""
    return f"{100 * sol.share:.0f}%{side}{ref}"


@dataclass
class Point:
    key: str
    x: float  # FLOP/byte (X_MIN for none)
    y: float  # FLOP/s (bytes/s x x)
    reference: bool


def roofline_points(run: RunFile) -> list[Point]:
    """One point per correct sample with a share, one hollow per problem's reference."""
    points, refs = [], {}
    for r in last_turns(run.samples):
        if not is_correct(r) or r.sol is None or r.work is None or not r.work.bytes:
            continue
        x = max(r.work.intensity or 0.0, X_MIN)
        if r.sol.bytes_per_s:
            points.append(Point(r.key, x, r.sol.bytes_per_s * x, False))
        if r.sol.reference_byte_share and r.sol.bandwidth_bytes_per_s:
            rate = r.sol.reference_byte_share * r.sol.bandwidth_bytes_per_s
            refs[r.key] = Point(r.key, x, rate * x, True)
    return points + list(refs.values())


def _ceilings(run: RunFile) -> tuple[float | None, float | None]:
    """(bandwidth bytes/s, matmul peak FLOP/s) as the run's samples recorded them."""
    for r in run.samples:
        if r.sol is not None and r.sol.bandwidth_bytes_per_s:
            return r.sol.bandwidth_bytes_per_s, r.sol.peak_flops_per_s
    return None, None


def draw(run: RunFile, title: str):
    """The figure and each point's pixel (x, y from the top left); None without shares."""
    from kb_eval.report.plots import pyplot

    points = roofline_points(run)
    bw, peak = _ceilings(run)
    if not points or not bw:
        return None
    xs = [p.x for p in points]
    lo, hi = X_MIN / 2, max(max(xs) * 4, (peak or 0) / bw * 4, 64.0)
    fig, ax = pyplot().subplots(figsize=SIZE_IN, dpi=DPI)
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(grid, [bw * x if not peak else min(bw * x, peak) for x in grid], color="grey",
            linewidth=1.5, label=f"ceilings: {bw / 1e9:.0f} GB/s" +
            (f", {peak / 1e12:.3g} TFLOP/s" if peak else ""))
    if peak:
        ax.axhline(peak, color="grey", linestyle=":", linewidth=1)
    for hollow, colour, label in ((False, SAMPLE_COLOUR, "samples"),
                                  (True, REFERENCE_COLOUR, "reference")):
        sel = [p for p in points if p.reference == hollow]
        if sel:
            ax.scatter([p.x for p in sel], [p.y for p in sel], s=46, label=label,
                       facecolors="none" if hollow else colour, edgecolors=colour,
                       linewidths=1.6, zorder=3)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), xlabel="arithmetic intensity "
           f"(FLOP/byte; no FLOPs: {X_MIN:g})", ylabel="achieved FLOP/s", title=title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower right")
    fig.canvas.draw()
    height = fig.get_size_inches()[1] * fig.dpi
    pixels = [(float(px), float(height - py), p.reference)
              for p, (px, py) in zip(points, ax.transData.transform([(p.x, p.y)
                                                                     for p in points]))]
    return fig, pixels


def roofline_png(run: RunFile, title: str) -> tuple[str, list] | None:
    """(base64 PNG, point pixels) of the run's roofline, or None (no shares)."""
    drawn = draw(run, title)
    if drawn is None:
        return None
    from kb_eval.report.plots import png

    fig, pixels = drawn
    return png(fig, dpi=DPI, bbox_inches=None), pixels  # not tight: pixels stay where drawn


def roofline_html(stats: list, all_runs: bool) -> str:
    """One roofline image per run (report.tables.RunStats) that has shares."""
    from kb_eval.report.plots import run_label

    out = []
    for st in stats:
        label = run_label(st, all_runs)
        drawn = roofline_png(st.entry.run, f"roofline: {label}")
        if drawn is not None:
            out.append(f"<img class=plot alt=\"roofline {html.escape(label)}\" "
                       f"src=\"data:image/png;base64,{drawn[0]}\">")
    return ("<h3>roofline (filled: samples, hollow: reference)</h3>" + "".join(out)
            if out else "")
