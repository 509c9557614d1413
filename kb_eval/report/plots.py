"""The report's figures, drawn with matplotlib (Agg) and returned as base64 PNG for the
HTML page."""

from __future__ import annotations

import base64
import io
import math

from kb_eval.eval.judge.score import counted_speedup, summarize
from kb_eval.report.tables import RunStats
from kb_eval.report.text import last_turns

P_GRID = [i / 20 for i in range(0, 81)]  # fast_p for p in 0 .. 4


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png(fig, **savefig) -> str:
    """The figure as base64 PNG (closed after); tight at 90 dpi unless `savefig` says."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", **({"dpi": 90, "bbox_inches": "tight"} | savefig))
    pyplot().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def times_ticks(axis) -> None:
    """Label a log axis's ticks as speedups (`0.98×`, `2×`), not `9.8×10⁻¹`."""
    from matplotlib.ticker import LogFormatterSciNotation

    class Times(LogFormatterSciNotation):
        def __call__(self, x, pos=None):
            return f"{x:.4g}×" if super().__call__(x, pos) else ""

    axis.set_major_formatter(Times())
    axis.set_minor_formatter(Times(labelOnlyBase=False, minor_thresholds=(2, 0.4)))


def run_label(st: RunStats, all_runs: bool) -> str:
    return f"{st.entry.model} ({st.entry.run.run})" if all_runs else st.entry.model


def fast_p_curve(stats: list[RunStats], all_runs: bool = False) -> str:
    """fast_p against p (0 to 4), one line per run."""
    fig, ax = pyplot().subplots(figsize=(7, 3.6))
    for st in stats:
        run = st.entry.run
        s = summarize(run.samples, run.problems_asked, run.samples_per_problem,
                      fast_ps=P_GRID, ks=())
        ax.plot(P_GRID, [100 * v for v in s.fast_p.values()], label=run_label(st, all_runs),
                linewidth=2)
    ax.axvline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set(xlabel="speedup threshold p", ylabel="fast_p (% of problems)", xlim=(0, 4),
           ylim=(0, 102), title="fast_p by threshold")  # 100% stays visible
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    return png(fig)


def speedup_distribution(stats: list[RunStats], all_runs: bool = False) -> str:
    """Counted speedups of the last turns, one box and its points per run, log axis."""
    data, labels = [], []
    for st in stats:
        last = last_turns(st.entry.run.samples)
        data.append([s for s in map(counted_speedup, last) if s and s > 0])
        labels.append(run_label(st, all_runs))
    fig, ax = pyplot().subplots(figsize=(7, 0.6 * len(stats) + 1.6))
    if not any(data):
        ax.text(0.5, 0.5, "no counted speedups (correct, unflagged samples)", ha="center",
                va="center")
        ax.set_axis_off()
        return png(fig)
    ax.boxplot([d or [math.nan] for d in data], orientation="horizontal", widths=0.5)
    for i, d in enumerate(data, start=1):
        ax.scatter(d, [i + 0.15 * math.sin(7 * j) for j in range(len(d))], s=12, alpha=0.6)
    ax.set_yticks(range(1, len(labels) + 1), labels)
    ax.set_xscale("log")
    times_ticks(ax.xaxis)
    ax.axvline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set(xlabel="speedup over the baseline (log scale)", title="speedup distribution")
    ax.grid(alpha=0.3, axis="x")
    return png(fig)
