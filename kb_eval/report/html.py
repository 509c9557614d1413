"""`--html FILE`: one self-contained page (inline CSS, JS, base64 PNG and JSON) that opens
from disk with no network; heat-map cells open the samples behind them.

Untrusted text reaches the page only as JSON rendered with textContent, never as HTML.
Script errors go into #js-errors, so a headless browser's DOM dump shows a clean run.
"""

from __future__ import annotations

import html
import json
import math
import re

from kb_eval.report import plots
from kb_eval.report.roofline import roofline_html
from kb_eval.report.runs import GroupKey
from kb_eval.report.samples import CodeFinder, cell_summary, sample_view
from kb_eval.report.tables import RunStats, level_rows, model_rows, rank_order, times
from kb_eval.results import level_of

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:36px;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:8px 0 16px;font-size:12px}
th,td{border:1px solid #ddd;padding:3px 4px;text-align:right;white-space:nowrap}
th{background:#f3f3f3;white-space:normal;vertical-align:bottom}
td.l,th.l{text-align:left}td.w{white-space:normal}
.heat td.cell{cursor:pointer;min-width:64px;text-align:center}
.heat td.cell:hover{outline:2px solid #333}
.wide{overflow-x:auto}img{max-width:100%;display:block;margin:8px 0}
#detail{position:fixed;top:0;right:0;width:46%;height:100%;overflow:auto;background:#fff;
border-left:2px solid #888;padding:12px 16px;box-shadow:-4px 0 12px #0003;display:none}
#detail pre{background:#f7f7f7;padding:8px;overflow:auto;font-size:12px}
#js-errors:not(:empty){color:#b00;border:1px solid #b00;padding:6px}
.note{color:#666}
"""

# Installed before anything else runs, so that every later script error is caught.
ERROR_HOOK = """
window.__errors=[];
function __report(m){window.__errors.push(String(m));var d=document.getElementById('js-errors');
if(d){d.textContent=window.__errors.join('\\n');}}
window.addEventListener('error',function(e){__report('error: '+e.message);});
window.addEventListener('unhandledrejection',function(e){__report('rejection: '+e.reason);});
(function(){var ce=console.error;console.error=function(){__report('console.error: '+
Array.prototype.join.call(arguments,' '));ce.apply(console,arguments);};})();
"""

JS = """
var DATA=JSON.parse(document.getElementById('kb-data').textContent);
function el(tag,text){var e=document.createElement(tag);if(text!==undefined&&text!==null)
e.textContent=String(text);return e;}
function fmt(x){return x===null||x===undefined?'-':x;}
function showCell(id){var cell=DATA.cells[id];if(!cell){return false;}
var d=document.getElementById('detail');d.replaceChildren();
var close=el('button','close');close.onclick=function(){d.style.display='none';};
d.appendChild(close);d.appendChild(el('h3',cell.model+' / '+cell.run+' / '+cell.problem));
if(!cell.samples.length){d.appendChild(el('p','no record for this problem'));}
cell.samples.forEach(function(s){
 d.appendChild(el('h4','sample '+s.sample+', turn '+s.turn+': '+s.status));
 var t=el('table');[['status',s.status],['correct',s.correct],['error',s.error],
 ['flags',s.flags.length?s.flags.join('; '):'-'],['speedup',s.speedup===null?'-':
 s.speedup.toFixed(3)+'x'],['speedup_ci',s.speedup_ci?'['+s.speedup_ci.map(function(v){return v.toFixed(2);})
 .join('-')+']':'-'],
 ['counted speedup',s.counted_speedup===null?'-':s.counted_speedup.toFixed(3)+'x'],
 ['candidate ms',fmt(s.candidate_ms)],['speed of light',fmt(s.sol)],['baseline ms',fmt(s.baseline_ms)],
 ['launches',s.launches||'-'],
 ['source_sha256',s.source_sha256||'-']].forEach(function(kv){var tr=el('tr');
 var th=el('th',kv[0]);th.className='l';var td=el('td',fmt(kv[1]));td.className='l';
 tr.appendChild(th);tr.appendChild(td);t.appendChild(tr);});d.appendChild(t);
 if(s.detail){d.appendChild(el('pre',s.detail));}
 var code=el('pre',s.code===null?'(code not found under the run folder)':s.code);
 code.className='code';d.appendChild(code);});
d.style.display='block';d.dataset.cell=id;return true;}
document.addEventListener('click',function(e){var c=e.target.closest('[data-cell]');
if(c){showCell(c.dataset.cell);}});
var m=location.hash.match(/^#cell=(.+)$/);if(m){showCell(decodeURIComponent(m[1]));}
document.body.dataset.ready='1';
"""


def html_table(rows: list[dict]) -> str:
    if not rows:
        return "<p class=note>(none)</p>"
    left = {"model", "run", "complete"}
    head = "".join(f"<th class={'l' if c in left else 'r'}>{_breakable(str(c))}</th>"
                   for c in rows[0])
    # Headers and text columns wrap to fit a 1400 px page; wider tables scroll.
    body = "".join("<tr>" + "".join(f"<td class=\"{'l w' if c in left else 'r'}\">"
                                    f"{html.escape(str(v))}</td>" for c, v in r.items())
                   + "</tr>" for r in rows)
    return f"<div class=wide><table><tr>{head}</tr>{body}</table></div>"


def _breakable(name: str) -> str:
    """A column name that may wrap after '/', '_' and '@' (samples/problem, pass@10)."""
    return re.sub(r"([/_@])", r"\1<wbr>", html.escape(name))


def _colour(speedup: float | None, status: str) -> str:
    """Green for faster than the baseline, amber for slower, red for wrong, grey for no
    record; the shade follows log2 of the speedup (capped at 4x either way)."""
    if speedup:
        t = max(-1.0, min(1.0, math.log2(speedup) / 2))
        if t >= 0:
            return f"hsl(120,55%,{88 - 40 * t:.0f}%)"
        return f"hsl(40,85%,{80 + 10 * t:.0f}%)"
    return {"correct": "hsl(60,60%,80%)", "missing": "#eee"}.get(status, "hsl(0,65%,82%)")


def problem_order(key: str) -> tuple:
    """<source>/level<N>/<id> by source, level, then id as a number (6 before 10)."""
    head, _, last = key.rpartition("/")
    return (head.rsplit("/", 1)[0], level_of(key), int(last) if last.isdigit() else 0, last)


def heat_map(gi: int, stats: list[RunStats], cells: dict, all_runs: bool) -> str:
    """Problems x runs (best first); fills `cells` with what each cell opens."""
    stats = rank_order(stats)
    keys = sorted({k for st in stats for k in st.entry.run.problems_asked}, key=problem_order)
    head = "".join(f"<th>{html.escape(plots.run_label(st, all_runs))}</th>" for st in stats)
    out = [f"<table class=heat><tr><th class=l>problem</th>{head}</tr>"]
    finders = [CodeFinder(st.entry.run_dir) for st in stats]
    for key in keys:
        tds = []
        for j, st in enumerate(stats):
            recs = sorted((r for r in st.entry.run.samples if r.key == key),
                          key=lambda r: (r.sample, r.turn))
            best, status = cell_summary(recs)
            cid = f"g{gi}-r{j}-{key}"
            cells[cid] = {"model": st.entry.model, "run": st.entry.run.run, "problem": key,
                          "samples": [sample_view(r, finders[j]) for r in recs]}
            text = times(best) if best else status
            tds.append(f"<td class=cell data-cell=\"{html.escape(cid)}\" "
                       f"style=\"background:{_colour(best, status)}\">{html.escape(text)}</td>")
        out.append(f"<tr><td class=l>{html.escape(key)}</td>{''.join(tds)}</tr>")
    return "".join(out) + "</table>"


def group_section(gi: int, key: GroupKey, stats: list[RunStats], cells: dict,
                  all_runs: bool) -> str:
    curve = plots.fast_p_curve(stats, all_runs)
    dist = plots.speedup_distribution(stats, all_runs)
    return "".join([
        f"<section><h2>{html.escape(key.label)}</h2>",
        "<h3>models</h3>", html_table(model_rows(stats)),
        "<h3>by level</h3>", html_table(level_rows(stats)),
        f"<img class=plot alt=\"fast_p curve\" src=\"data:image/png;base64,{curve}\">",
        f"<img class=plot alt=\"speedup distribution\" src=\"data:image/png;base64,{dist}\">",
        roofline_html(stats, all_runs),
        "<h3>problems x models (click a cell for its samples)</h3>",
        heat_map(gi, stats, cells, all_runs), "</section>"])


def render_html(groups: dict[GroupKey, list[RunStats]], notes: list[str],
                all_runs: bool = False) -> str:
    cells: dict = {}
    sections = [group_section(i, key, stats, cells, all_runs)
                for i, (key, stats) in enumerate(groups.items())]
    # "<" escaped so that no string in the data can close the script element.
    data = json.dumps({"cells": cells}).replace("<", "\\u003c")
    note_html = "".join(f"<p class=note>{html.escape(n)}</p>" for n in notes)
    return ("<!DOCTYPE html><html><head><meta charset=utf-8><title>kb-eval report</title>"
            f"<style>{CSS}</style><script>{ERROR_HOOK}</script></head><body>"
            "<h1>kb-eval report</h1><div id=js-errors></div>"
            "<p class=note>Runs are ranked only within a group: same hardware, precision, "
            "backend, baseline kind and problems asked. Rates are % of the problems asked."
            f"</p>{note_html}{''.join(sections)}<aside id=detail></aside>"
            f"<script type=application/json id=kb-data>{data}</script>"
            f"<script>{JS}</script></body></html>")
