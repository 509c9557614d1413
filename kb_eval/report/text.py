"""Plain-text tables of one run (the summary `python -m kb_eval.run` prints at its end,
its samples) and of the configured models (`--list-models`)."""

from __future__ import annotations

import os
from collections import Counter
from typing import Iterable

from kb_eval.results import RunFile, SampleRecord


def text_table(rows: list[dict]) -> str:
    """Rows of equal keys as left-aligned columns (numbers right-aligned)."""
    if not rows:
        return ""
    cols = list(rows[0])
    cells = [[str(c) for c in cols]] + [["-" if r[c] is None else str(r[c]) for c in cols]
                                         for r in rows]
    width = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    numeric = [all(isinstance(r[c], (int, float)) for r in rows) for c in cols]
    lines = []
    for row in cells:
        lines.append("  ".join(v.rjust(w) if num else v.ljust(w)
                               for v, w, num in zip(row, width, numeric)).rstrip())
    return "\n".join(lines)


# ------------------------------------------------------------------ inference usage
def usage_totals(records: Iterable[SampleRecord]) -> dict:
    """Tokens, cost and answers over the records that carry inference fields (run stage)."""
    totals = {"answers": 0, "cached_answers": 0, "prompt_tokens": 0, "completion_tokens": 0,
              "cost_usd": None, "latency_s": 0.0}
    for r in records:
        if r.prompt_tokens is None:  # not an answer of the run stage
            continue
        totals["answers"] += 1
        totals["cached_answers"] += bool(r.response_cached)
        totals["prompt_tokens"] += r.prompt_tokens
        totals["completion_tokens"] += r.completion_tokens or 0
        totals["latency_s"] += r.latency_s or 0.0
        if r.cost is not None:
            totals["cost_usd"] = (totals["cost_usd"] or 0.0) + r.cost
    totals["latency_s"] = round(totals["latency_s"], 3)
    return totals


# ------------------------------------------------------------------ one run
def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"  # "-": missing, as in every table


def _money(x: float | None) -> str:
    return "- (no prices in config.py)" if x is None else f"${x:.4f}"


def summary_table(run: RunFile) -> str:
    """The run's scores as a two-column table."""
    s = run.summary
    if s is None:
        return "(no summary)"
    usage = getattr(run, "usage", None) or usage_totals(run.samples)
    rows = [("problems asked", s.problems), ("samples per problem", s.samples_per_problem),
            ("samples recorded (last turns)", s.samples),
            ("compiled rate", pct(s.compiled_rate)), ("correct rate", pct(s.correct_rate))]
    rows += [(name, pct(v)) for name, v in s.fast_p.items() if name in ("fast_1", "fast_2")]
    rows += [(name, pct(v)) for name, v in s.fast_p.items() if name not in ("fast_1", "fast_2")]
    rows += [(name, pct(v)) for name, v in s.sol_p.items()]  # >= p of speed of light
    # the same, counting only speedups whose 95 % interval lies above p
    rows += [(f"{name}_sig", pct(v)) for name, v in s.fast_p_sig.items()
             if name in ("fast_1", "fast_2")]
    geo = f"{s.geomean_speedup:.3f}x" if s.geomean_speedup else "- (no speedup counted)"
    rows.append(("geomean speedup (correct)", geo))
    if s.geomean_vs_baseline:  # the baseline file's figure, beside the paired one
        rows.append(("geomean vs baseline file", f"{s.geomean_vs_baseline:.3f}x"))
    uncounted = Counter(code for r in last_turns(run.samples) for code in uncounted_codes(r))
    if uncounted:  # correct, but left out of fast_p and the geomean: say so
        rows.append(("speedups not counted", ", ".join(
            f"{code} {n}" for code, n in sorted(uncounted.items())) + " (fast_p, geomean)"))
    rows += [(name, pct(v)) for name, v in s.pass_at_k.items()]
    for name, lv in s.levels.items():  # the same figures per level, in one line each
        lgeo = f"{lv.geomean_speedup:.3f}x" if lv.geomean_speedup else "-"
        rows.append((f"{name} ({lv.problems} problems)",
                     f"correct {pct(lv.correct_rate)}, fast_1 "
                     f"{pct(lv.fast_p.get('fast_1'))}, geomean {lgeo}"))
    rows.append(("status counts", ", ".join(f"{k} {v}" for k, v in
                                            sorted(s.status_counts.items())) or "-"))
    tokens = usage["prompt_tokens"] + usage["completion_tokens"]
    rows += [("answers (cached)", f"{usage['answers']} ({usage['cached_answers']})"),
             ("tokens (prompt + completion)",
              f"{tokens} ({usage['prompt_tokens']} + {usage['completion_tokens']})"),
             ("cost", _money(usage["cost_usd"]))]
    return text_table([{"metric": m, "value": str(v)} for m, v in rows])


def last_turns(records: Iterable[SampleRecord]) -> list[SampleRecord]:
    """The last turn recorded of each (problem, sample)."""
    last: dict[tuple[str, int], SampleRecord] = {}
    for r in records:
        if (r.key, r.sample) not in last or r.turn >= last[(r.key, r.sample)].turn:
            last[(r.key, r.sample)] = r
    return list(last.values())


def _speedup(r) -> str:
    """1.23x [1.10-1.35]: the speedup and its 95 % interval, when there is one."""
    if not r.speedup:
        return "-"
    ci = getattr(r, "speedup_ci", None)
    return f"{r.speedup:.2f}x" + (f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else "")


def cut(text: str, width: int) -> str:
    """text in at most `width` characters, a cut one ending in an ellipsis."""
    return text if len(text) <= width else text[:width - 1] + "…"


def uncounted_codes(r) -> list[str]:
    """The flags that void a correct sample's speedup (it is not counted), if any."""
    from kb_eval.eval.judge.score import VOIDS_SPEEDUP, is_correct

    if not is_correct(r) or not r.speedup:
        return []
    return [f.code for f in r.flags if f.code in VOIDS_SPEEDUP]


def uncounted_reason(r) -> str | None:
    codes = uncounted_codes(r)
    return f"speedup not counted: {', '.join(codes)}" if codes else None


def samples_table(run: RunFile, max_rows: int = 40) -> str:
    """One row per recorded sample turn, with the first line of its error or why its
    speedup is not counted; past max_rows, a count."""
    from kb_eval.report.roofline import sol_text  # its scoring imports stay off this path

    ordered = sorted(run.samples, key=lambda r: (r.level, r.problem_id, r.sample, r.turn))
    rows = [{"problem": r.key, "sample": r.sample, "turn": r.turn, "status": r.status,
             "speedup [95% CI]": _speedup(r), "sol": sol_text(r),
             "error / not counted": cut(uncounted_reason(r) or
                                        (r.error or "").strip().partition("\n")[0], 70)}
            for r in ordered[:max_rows]]
    more = len(ordered) - max_rows
    return text_table(rows) + (f"\n... {more} more sample(s) in results.json"
                               if more > 0 else "")


# ------------------------------------------------------------------ models
def models_table(endpoints: list) -> str:
    """--list-models: name, endpoint, model id, key env var (set?), concurrency, prices."""
    rows = [{"name": "reference", "endpoint": "(built-in, offline)",
             "model id": "reference_kernels/solutions", "api key": "-", "concurrency": 4,
             "$/Mtok in": "0", "$/Mtok out": "0"}]
    for ep in endpoints:
        if ep.api_key_env:
            key = f"{ep.api_key_env} ({'set' if os.environ.get(ep.api_key_env, '').strip() else 'NOT set'})"
        else:
            key = "- (none needed)"
        rows.append({"name": ep.name, "endpoint": ep.base_url, "model id": ep.model,
                     "api key": key, "concurrency": ep.max_concurrency,
                     "$/Mtok in": _price(ep.price_in_per_mtok),
                     "$/Mtok out": _price(ep.price_out_per_mtok)})
    return text_table(rows)


def _price(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"
