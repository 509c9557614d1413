"""Evaluation throughput, end to end: the candidates, cold cache then warm cache.

    python benchmarks/eval_throughput.py                 # the corpus: 210 model-style candidates
    python benchmarks/eval_throughput.py --corpus /tmp/kb_corpus   # a folder of candidates
    python benchmarks/eval_throughput.py --synthetic     # GPU: 100 generated CUDA candidates
    python benchmarks/eval_throughput.py --synthetic --backend cpp --n 4 --trials 5   # CPU smoke
    python benchmarks/eval_throughput.py --ray-address HOST:PORT|auto|local   # on Ray

By default the corpus of benchmarks/corpus/make_corpus.py (levels 1-3, in the shapes
trained models write: load_inline at import, in __init__ or in forward, CUDA graphs,
torch.compile, jit, backend switches, slow, wrong and crashing ones) is generated into
<workdir>/corpus and evaluated over `--source` problems; each pass then also compares the
verdicts with its expected.json. `--n` takes that many of it, spread over the corpus.

With `--synthetic`, candidates are variants of a few kernels (elementwise scale-add, bias+ReLU, GELU, row
sum) over problems written to a temporary KernelBench-layout folder; each variant differs
in block size, unrolling and a variant tag, so every source is distinct and builds on its
own. Pass 1 starts from an empty build cache (every candidate compiles); pass 2 evaluates
the same sources again (every build is a cache hit). Each pass: 5 correctness trials, then
`--trials` timed calls per candidate, live reference timing. Targets on one H200 with 16
cores: cold <= 6 min, warm <= 2 min for 100 candidates. `--corpus` evaluates a folder of
level<L>_problem<ID>_sample<S>.py candidates over `--source` problems instead.

`--ray-address` runs both passes on a Ray cluster (as `python -m kb_eval.eval` takes it;
`local` starts a one-machine cluster): joined once before pass 1 (the seconds it took
printed apart), so both passes share it; each pass starts its own lane actors. Run the
command once without it and once with it to compare. On a cluster of several
machines, --workdir must be a path every node sees (the build cache lives there).

Each pass prints samples/s; the timing lock's share of the wall, the lock wait per sample
(median, max) and the longest wait with who held the device meanwhile; and the compile
seconds run children spent (estimated from the records' phases: benchmarks/
throughput_figures.py). Then the device busy share: the seconds the candidates' timing
steps held the devices' timing locks (they never overlap on one device) and, as an upper
bound, those plus correctness and reference seconds (correctness overlaps between the
children in flight, so it may count more than once), each over wall x devices. Beside
it, the reference servers' share: the seconds they worked on samples' calls (phases
`server` and `pair_reference_server`; one server per device runs one call at a time), so
whichever of the two serial resources is near 100 % is the one that bounds the pass.
Last, how many samples waited for room on the device at a time, on average (phase
`wait_slot`, eval/schedule/overlap.py): on the H100, KernelBench level 1's copies at lane
depth 3 had 1.4 of their 3 lanes waiting so (session 10). Since each device's lanes also
hold up to two samples planned ahead (`WAITING_LANES`), so that a small one can pass a
large one waiting for room, up to two more wait there by design. And, from a trace of
the devices' lock (kb_eval/devlock.py, `<workdir>/locks_<pass>.trace`), the exact shares
of the time a device was held alone (timing), only shared (untimed device work) or not
at all: what the samples' CPU-side steps leave the device idle; and the gaps between
one timing step and the next (`devlock.timing_gaps`): how long the device waited for a
child ready to time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kb_eval.cli import GPU_LANE_DEPTH, lane_depth, sigterm_as_interrupt  # noqa: E402
from kb_eval.devlock import TRACE_VAR, hold_shares, timing_gaps  # noqa: E402
from kb_eval.errors import UserError  # noqa: E402
from kb_eval.eval import EvalConfig, evaluate  # noqa: E402
from kb_eval.eval.config import default_jobs  # noqa: E402
from kb_eval.problems import load_problems  # noqa: E402
from kb_eval.ray_cluster import add_executor_flags, executor_config  # noqa: E402
from kb_eval.settings import Defaults  # noqa: E402
from kb_eval.timing import TimingSettings  # noqa: E402

from throughput_figures import compile_lines, expected_lines, lock_lines  # noqa: E402

MAKE_CORPUS = Path(__file__).resolve().parent / "corpus" / "make_corpus.py"

# ------------------------------------------------------------------ problems
PROBLEMS = {
    1: ("ScaleAdd", "return 2 * x + y", "[torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]"),
    2: ("BiasRelu", "return torch.relu(x + y)", "[torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]"),
    3: ("Gelu", "return torch.nn.functional.gelu(x, approximate='tanh') + 0 * y",
        "[torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]"),
    4: ("RowSum", "return x.sum(dim=1) + y.sum(dim=1)",
        "[torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]"),
}

PROBLEM_TEMPLATE = '''import torch
import torch.nn as nn

ROWS, COLS = {rows}, {cols}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        {body}


def get_inputs():
    return {inputs}


def get_init_inputs():
    return []
'''

# ------------------------------------------------------------------ kernels
# Per problem: the elementwise expression, or None for the row-sum.
EXPR = {1: "2.0f * a + b", 2: "fmaxf(a + b, 0.0f)",
        3: "0.5f * a * (1.0f + tanhf(0.7978845608f * (a + 0.044715f * a * a * a)))"}

CUDA_ELEMENTWISE = r'''
#include <torch/extension.h>
// variant {tag}
__global__ void k_{tag}(const float* __restrict__ x, const float* __restrict__ y,
                        float* __restrict__ out, int64_t n) {{
    int64_t base = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * {unroll};
    #pragma unroll
    for (int u = 0; u < {unroll}; ++u) {{
        int64_t i = base + u;
        if (i < n) {{ float a = x[i], b = y[i]; out[i] = {expr}; }}
    }}
}}
torch::Tensor run(torch::Tensor x, torch::Tensor y) {{
    auto xc = x.contiguous(), yc = y.contiguous();
    auto out = torch::empty_like(xc);
    int64_t n = xc.numel();
    int64_t per_block = {threads} * {unroll};
    k_{tag}<<<(unsigned)((n + per_block - 1) / per_block), {threads}>>>(
        xc.data_ptr<float>(), yc.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}}
'''

CUDA_ROWSUM = r'''
#include <torch/extension.h>
// variant {tag}
__global__ void k_{tag}(const float* __restrict__ x, const float* __restrict__ y,
                        float* __restrict__ out, int64_t cols) {{
    __shared__ float buf[{threads}];
    const float* xr = x + blockIdx.x * cols;
    const float* yr = y + blockIdx.x * cols;
    float acc = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += {threads}) acc += xr[j] + yr[j];
    buf[threadIdx.x] = acc;
    __syncthreads();
    for (int s = {threads} / 2; s > 0; s >>= 1) {{
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }}
    if (threadIdx.x == 0) out[blockIdx.x] = buf[0];
}}
torch::Tensor run(torch::Tensor x, torch::Tensor y) {{
    auto xc = x.contiguous(), yc = y.contiguous();
    auto out = torch::empty({{xc.size(0)}}, xc.options());
    k_{tag}<<<(unsigned)xc.size(0), {threads}>>>(xc.data_ptr<float>(), yc.data_ptr<float>(),
                                                out.data_ptr<float>(), xc.size(1));
    return out;
}}
'''

CPP_ELEMENTWISE = r'''
#include <cmath>
// variant {tag}
torch::Tensor run(torch::Tensor x, torch::Tensor y) {{
    auto xc = x.contiguous(), yc = y.contiguous();
    auto out = torch::empty_like(xc);
    const float* px = xc.data_ptr<float>(); const float* py = yc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    int64_t n = xc.numel();
    for (int64_t base = 0; base < n; base += {unroll})
        for (int64_t i = base; i < base + {unroll} && i < n; ++i) {{
            float a = px[i], b = py[i]; po[i] = {expr};
        }}
    return out;
}}
'''

CPP_ROWSUM = r'''
// variant {tag}
torch::Tensor run(torch::Tensor x, torch::Tensor y) {{
    auto xc = x.contiguous(), yc = y.contiguous();
    int64_t rows = xc.size(0), cols = xc.size(1);
    auto out = torch::empty({{rows}}, xc.options());
    const float* px = xc.data_ptr<float>(); const float* py = yc.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {{
        float acc = 0.0f;
        for (int64_t j = 0; j < cols; j += {unroll})
            for (int64_t k = j; k < j + {unroll} && k < cols; ++k) acc += px[r * cols + k] + py[r * cols + k];
        out.data_ptr<float>()[r] = acc;
    }}
    return out;
}}
'''

CANDIDATE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""{source}"""

ext = load_inline("kb_bench_{tag}", {sources}, functions=["run"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return ext.run(x, y)
'''


def candidate_source(i: int, problem_id: int, backend: str) -> str:
    threads = (128, 256, 512, 1024)[(i // len(PROBLEMS)) % 4]
    unroll = (1, 2, 4)[(i // (4 * len(PROBLEMS))) % 3]
    tag = f"v{i}_p{problem_id}_t{threads}_u{unroll}"
    expr = EXPR.get(problem_id)
    if backend == "cuda":
        body = (CUDA_ELEMENTWISE.format(tag=tag, unroll=unroll, threads=threads, expr=expr)
                if expr else CUDA_ROWSUM.format(tag=tag, threads=threads))
        sources = 'cpp_sources="torch::Tensor run(torch::Tensor x, torch::Tensor y);", cuda_sources=SOURCE'
    else:
        body = (CPP_ELEMENTWISE.format(tag=tag, unroll=unroll, expr=expr) if expr
                else CPP_ROWSUM.format(tag=tag, unroll=unroll))
        sources = "cpp_sources=SOURCE"
    return CANDIDATE.format(source=body, tag=tag, sources=sources)


def write_problems(root: Path, rows: int, cols: int) -> Path:
    level = root / "problems" / "level1"
    level.mkdir(parents=True)
    for pid, (name, body, inputs) in PROBLEMS.items():
        (level / f"{pid}_{name}.py").write_text(
            PROBLEM_TEMPLATE.format(rows=rows, cols=cols, body=body, inputs=inputs))
    return root / "problems"


def children_cpu_s() -> float:
    """CPU seconds of every child process ended so far (builds with their compilers)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def busy_share(phases: list[dict], wall: float, devices: int) -> str:
    """Samples/s and the device busy share (module docstring), from each sample's phases."""
    def total(step: str) -> float:
        return sum(ph.get(step, 0.0) for ph in phases)

    held = total("child_timing")
    work = held + total("child_correctness") + total("reference")
    server = total("server") + total("pair_reference_server")
    return (f"{len(phases) / wall:.2f} samples/s; device busy share: timing lock "
            f"{held / (wall * devices):.0%}, with correctness and reference <= "
            f"{min(1.0, work / (wall * devices)):.0%} ({devices} device(s)); reference "
            f"server busy {server / (wall * devices):.0%}; samples planned and waiting for "
            f"room on the device {total('wait_slot') / wall:.1f} at a time")


def hold_summary(held: dict[str, float]) -> str:
    """The devices' lock holds as shares of the time they were in use (devlock.py)."""
    span = sum(held.values()) or 1.0
    return (f"device lock over {span:.1f} s (first hold to last release, summed over "
            f"devices): held alone {held['exclusive'] / span:.0%}, shared only "
            f"{held['shared'] / span:.0%}, not held {held['none'] / span:.0%}")


def gap_summary(gaps: list[float], long_s: float = 0.2) -> str:
    """Between one timing step and the next on a device (devlock.timing_gaps): how often
    and how long the device waited for a child ready to time."""
    if not gaps:
        return "between timing steps: no two on one device"
    long = [g for g in gaps if g > long_s]
    return (f"between timing steps: {sum(gaps):.1f} s over {len(gaps)} gaps, "
            f"{len(long)} of them over {long_s} s ({sum(long):.1f} s"
            + (f", median {statistics.median(long):.2f} s)" if long else ")"))


def phase_medians(phases: list[dict]) -> str:
    names = sorted({k for ph in phases for k in ph})
    return "phases (median / total s): " + ", ".join(
        f"{k} {statistics.median([ph.get(k, 0.0) for ph in phases]):.2f} / "
        f"{sum(ph.get(k, 0.0) for ph in phases):.0f}" for k in names)


class Stopped(Exception):
    """A pass stopped by Ctrl-C or a time limit, with the samples it finished."""

    def __init__(self, records: list):
        super().__init__(f"stopped after {len(records)} samples")
        self.records = records


def one_pass(label: str, pairs, config: EvalConfig, devices: int = 1,
             trace: Path | None = None, every_ten=lambda records: None,
             corpus: Path | None = None) -> list:
    """Evaluate `pairs`, print the pass's figures, return its records. Stopped midway:
    the figures of the samples finished so far, then Stopped with them. `trace`: where
    the devices' lock holds are logged (kb_eval/devlock.py), emptied first. One file for
    every pass: the children's environment must not change between passes, or the
    zygote and the spare children started for one pass would not serve the next.
    `every_ten(records)` after every ten samples: a pass killed outright (SIGKILL, a
    machine's time limit) keeps what it had finished. `corpus`: its expected.json, if
    any, is compared with the verdicts."""
    if trace is not None:
        trace.write_text("")
        os.environ[TRACE_VAR] = str(trace)
    t0, cpu0 = time.monotonic(), children_cpu_s()
    records, stopped = [], False
    try:
        for r in evaluate(pairs, config):
            records.append(r)
            if len(records) % 10 == 0 or len(records) == len(pairs):
                print(f"  [{label}] {len(records)}/{len(pairs)} done at "
                      f"{time.monotonic() - t0:6.1f}s", flush=True)
                every_ten(records)
    except KeyboardInterrupt:  # the evaluation has stopped its children on the way out
        stopped = True
        label = f"{label}, STOPPED after {len(records)} of {len(pairs)}"
    summarize(label, records, config, devices, t0, cpu0)
    wall = time.monotonic() - t0
    figures = compile_lines(records, config.correct_trials) + expected_lines(records, corpus)
    if trace is not None:
        figures = lock_lines(trace, records, wall, devices) + figures
    for line in figures:
        print("  " + line, flush=True)
    if trace is not None and trace.stat().st_size:
        print("  " + hold_summary(hold_shares(trace)), flush=True)
        print("  " + gap_summary(timing_gaps(trace)), flush=True)
        shutil.copyfile(trace, trace.with_name(f"locks_{label.split()[0]}.trace"))
    if stopped:
        raise Stopped(records)
    return records


def summarize(label: str, records: list, config: EvalConfig, devices: int, t0: float,
              cpu0: float) -> None:
    wall, cpu = time.monotonic() - t0, children_cpu_s() - cpu0
    statuses = Counter(r.status for r in records)
    hits = sum(1 for r in records if r.build and r.build.cache_hit)
    builds = [r.build.seconds for r in records if r.build and not r.build.cache_hit and r.build.seconds]
    runs = [r.wall_s for r in records]
    speedups = [r.speedup for r in records if r.speedup]
    print(f"{label}: {len(records)} candidates in {wall:.1f} s wall "
          f"({wall / max(len(records), 1):.2f} s/candidate); statuses {dict(statuses)}; "
          f"cache hits {hits}")
    if config.executor == "ray":  # builds and lanes run in Ray's workers, not our children
        print("  children's CPU: not seen from the driver with --ray-address")
    else:
        print(f"  children's CPU: {cpu:.0f} core-seconds, {cpu / wall:.1f} cores busy on "
              f"average (of {os.cpu_count()})")
    if builds:
        print(f"  build child seconds: median {statistics.median(builds):.1f}, "
              f"max {max(builds):.1f}, sum {sum(builds):.0f}")
    headers = Counter(r.build.cuda_header for r in records if r.build and r.build.cuda_header)
    if headers:  # kb_eval/eval/schedule/nvcc_front.py
        print(f"  CUDA files' torch/extension.h: {dict(headers)}")
    ahead = [r.build.first_call_s for r in records if r.build and r.build.first_call_s]
    if ahead:  # lazy compiles run in the build pool (kb_eval/eval/schedule/first_call.py)
        print(f"  lazy compiles run ahead: {len(ahead)}, median "
              f"{statistics.median(ahead):.1f} s, sum {sum(ahead):.0f} s")
    if speedups:
        print(f"  speedup median {statistics.median(speedups):.2f}x "
              f"(min {min(speedups):.2f}, max {max(speedups):.2f})")
    flags = Counter(f.code for r in records for f in r.flags)
    if flags:  # e.g. fewer_rounds: very slow candidates timed in fewer rounds
        print(f"  flags: {dict(flags.most_common())}")
    print(f"  sample wall (submit to record) median {statistics.median(runs):.1f} s", flush=True)
    lanes = Counter(r.lane for r in records if getattr(r, "lane", None))
    if lanes:  # --ray-address: the Ray lane (node/device) that judged each sample
        print(f"  samples per Ray lane: {dict(lanes)}", flush=True)
    phases = [r.phases for r in records]
    print("  " + busy_share(phases, wall, devices), flush=True)
    print("  " + phase_medians(phases), flush=True)
    bad = [r for r in records if r.status != "correct"][:3]
    for r in bad:
        print(f"  ! {r.key} s{r.sample}: {r.status}: {r.error}\n    {(r.detail or '')[-600:]}")


def corpus_pairs(folder: Path, source: str) -> list:
    """(problem, sample, source) for every candidate file of `folder` (find_candidates'
    naming), over the problems of `source`."""
    from kb_eval.eval.candidates import find_candidates

    problems = {(p.level, p.problem_id): p for p in load_problems(source)}
    files = find_candidates([str(folder)])
    missing = sorted({(c.level, c.problem_id) for c in files} - set(problems))
    if missing:
        sys.exit(f"eval_throughput: {source} lacks problems {missing[:5]}")
    return [(problems[(c.level, c.problem_id)], c.sample, c.path.read_text()) for c in files]


def default_source() -> Path:
    """KernelBench's problems beside the checkout (the main one or a worktree's), or in it."""
    repo = Path(__file__).resolve().parents[1]
    places = [repo.parent / "shared" / "kernelbench", repo / "shared" / "kernelbench",
              repo.parents[1] / "shared" / "kernelbench"]
    return next((s for s in places if s.is_dir()), places[0])


def write_corpus(folder: Path, source: str) -> Path:
    """The corpus of benchmarks/corpus/make_corpus.py, written to `folder`."""
    done = subprocess.run([sys.executable, str(MAKE_CORPUS), str(folder), "--source", source],
                          capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"eval_throughput: make_corpus failed: {done.stderr.strip()[-300:]}")
    print(done.stdout.strip(), flush=True)
    return folder


def write_records(path: Path, passes: dict, args) -> None:
    """Per pass, each sample's verdict, flags and speedup with its interval (for comparing
    runs), and where its time went (`phases`, `wall_s`: to compare runs sample by sample)."""
    rows = {name: [{"key": r.key, "sample": r.sample, "status": r.status, "speedup": r.speedup,
                    "speedup_ci": r.speedup_ci, "flags": [f.code for f in r.flags],
                    "wall_s": r.wall_s, "phases": r.phases}
                   for r in records]
            for name, records in passes.items() if records}
    executor = "ray" if args.ray_address else "local"
    path.write_text(json.dumps({"lane_depth": args.lane_depth, "executor": executor,
                                "passes": rows}, indent=1))


def ray_devices(gpu: bool) -> int:
    """The lanes the Ray executor starts: each GPU of the cluster, or each live node's CPU."""
    import ray

    if gpu:
        return int(ray.cluster_resources().get("GPU", 0))
    return sum(1 for n in ray.nodes() if n["Alive"])


def main() -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=None, help="number of candidates (--synthetic: "
                   "default 100; the corpus: all, else this many spread over it)")
    p.add_argument("--synthetic", action="store_true", help="generated variants of four "
                   "kernels over four made-up problems instead of the corpus")
    p.add_argument("--backend", choices=["cuda", "cpp"],
                   default="cuda" if torch.cuda.is_available() else "cpp")
    p.add_argument("--trials", type=int, default=100,
                   help="timed calls per candidate (at most: see --timing-budget-ms)")
    p.add_argument("--timing-budget-ms", type=float, default=TimingSettings().budget_ms,
                   help="per sample, as many timed calls as take about this long at the "
                        "reference's speed, at least one per paired round (TimingSettings."
                        "budget_ms; 0: always --trials)")
    p.add_argument("--round-spin-up-ms", type=float, default=TimingSettings().round_spin_up_ms,
                   help="GPU work before each paired round on both sides (TimingSettings."
                        "round_spin_up_ms; 0: none, to measure what the spin-ups cost and "
                        "whether the reference copies' band holds without them)")
    p.add_argument("--no-round-untimed", action="store_true",
                   help="no untimed call at the head of each paired round, on both sides "
                        "(TimingSettings.round_untimed off: a round starts on its spin-up alone)")
    p.add_argument("--correct-trials", type=int, default=5)
    p.add_argument("--jobs", type=int, default=default_jobs(),
                   help="parallel build children (default: the eval's, cores + 25%%)")
    p.add_argument("--rows", type=int, default=None, help="rows of every input (default: "
                   "4096 on GPU, 256 on CPU)")
    p.add_argument("--cols", type=int, default=None, help="columns (default: 4096 / 256)")
    p.add_argument("--workdir", type=Path, default=None, help="keep files here (default: tmp;"
                   " with --ray-address on several machines: a path every node sees)")
    p.add_argument("--lane-depth", type=int, default=None,
                   help="candidate children in flight per device (1: one at a time; default: "
                        f"the commands', {GPU_LANE_DEPTH} on a GPU and 1 on a CPU)")
    p.add_argument("--load-budget", type=float, default=EvalConfig().load_budget_s,
                   help="seconds for a candidate's import, init and first call")
    p.add_argument("--call-budget", type=float, default=EvalConfig().call_budget_s,
                   help="seconds per later call")
    p.add_argument("--corpus", type=Path, default=None, help="evaluate this folder of "
                   "level<L>_problem<ID>_sample<S>.py candidates (default: benchmarks/"
                   "corpus/make_corpus.py's, written to <workdir>/corpus)")
    p.add_argument("--level", type=int, nargs="+", default=None, help="with --corpus: only "
                   "its candidates of these KernelBench levels (e.g. --level 2)")
    p.add_argument("--source", default=str(default_source()),
                   help="problems of the corpus (default: ../shared/kernelbench)")
    p.add_argument("--no-sandbox", action="store_true", help="candidates outside the "
                   "sandbox (kb_eval/isolation/sandbox.py), to measure what it costs")
    p.add_argument("--no-pch", action="store_true", help="compile without the precompiled "
                   "torch/extension.h (kb_eval/eval/schedule/pch.py), to measure what it saves")
    p.add_argument("--full-cuda-header", action="store_true", help="compile CUDA files "
                   "against the real torch/extension.h only (kb_eval/eval/schedule/"
                   "nvcc_front.py), to measure what the smaller ones save")
    p.add_argument("--warm-only", action="store_true", help="keep --workdir's build cache "
                   "from an earlier run and time only the warm pass (e.g. again with "
                   "another --lane-depth, to compare verdicts and speedups)")
    p.add_argument("--cold-only", action="store_true", help="time only the cold pass (e.g. "
                   "to compare executors' builds)")
    p.add_argument("--records", type=Path, default=None, help="write each sample's key, "
                   "status, speedup and speedup_ci per pass to this JSON file (two such "
                   "files: benchmarks/compare_records.py); every ten samples too, the "
                   "pass in progress as <pass>_so_far, so a killed run keeps them")
    add_executor_flags(p)  # --ray-address: as python -m kb_eval.eval
    for action in p._actions:  # here the build cache lives under --workdir
        if action.dest == "ray_address":
            action.help = action.help.replace("DEFAULTS cache_dir", "--workdir")
    args = p.parse_args()
    t0 = time.monotonic()
    try:  # joins the cluster now (Ray missing, a wrong address: one line)
        executor = executor_config(args)
    except UserError as e:
        sys.exit(f"eval_throughput: {e}")
    if executor:
        import ray

        print(f"joined the Ray cluster in {time.monotonic() - t0:.1f} s: "
              f"{ray.cluster_resources()}", flush=True)

    gpu = args.backend == "cuda"
    if args.lane_depth is None:
        args.lane_depth = lane_depth(Defaults(), cpu=not gpu)
    if args.warm_only and args.cold_only:
        sys.exit("eval_throughput: --warm-only and --cold-only exclude each other")
    if args.synthetic and (args.corpus or args.level):
        sys.exit("eval_throughput: --synthetic excludes --corpus and --level")
    if args.warm_only and args.workdir is None:
        sys.exit("eval_throughput: --warm-only needs the --workdir of an earlier run")
    root = args.workdir or Path(tempfile.mkdtemp(prefix="kb_eval_bench_"))
    root.mkdir(parents=True, exist_ok=True)
    if not args.warm_only:
        shutil.rmtree(root / "cache", ignore_errors=True)
    shutil.rmtree(root / "problems", ignore_errors=True)
    problems_dir = write_problems(root, args.rows or (4096 if gpu else 256),
                                  args.cols or (4096 if gpu else 256))
    if not args.synthetic:
        args.corpus = args.corpus or write_corpus(root / "corpus", args.source)
        pairs = [pair for pair in corpus_pairs(args.corpus, args.source)
                 if args.level is None or pair[0].level in args.level]
        if not pairs:
            sys.exit(f"eval_throughput: no candidates of level(s) {args.level} in {args.corpus}")
        if args.n and args.n < len(pairs):
            pairs = [pairs[i * len(pairs) // args.n] for i in range(args.n)]
    else:
        args.n = args.n or 100
        problems = {p.problem_id: p for p in load_problems(str(problems_dir))}
        pairs = []
        for i in range(args.n):
            pid = 1 + i % len(PROBLEMS)
            pairs.append((problems[pid], i, candidate_source(i, pid, args.backend)))
        assert len({src for _, _, src in pairs}) == len(pairs), "sources must be distinct"
    config = EvalConfig(backend=args.backend, live_baseline=True, jobs=args.jobs,
                        correct_trials=args.correct_trials,
                        timing=TimingSettings(trials=args.trials,
                                              round_spin_up_ms=args.round_spin_up_ms,
                                              round_untimed=not args.no_round_untimed,
                                              budget_ms=args.timing_budget_ms),
                        cache_dir=root / "cache", results_dir=root / "results",
                        pch=not args.no_pch, slim_cuda_header=not args.full_cuda_header,
                        lane_depth=args.lane_depth,
                        load_budget_s=args.load_budget, call_budget_s=args.call_budget,
                        sandbox=not args.no_sandbox, **executor)
    devices = ray_devices(gpu) if executor else torch.cuda.device_count() if gpu else 1
    what = (f"{len(pairs)} candidates of {args.corpus} over "
            f"{len({p.key for p, _, _ in pairs})} problems of {args.source}" if args.corpus
            else f"{args.n} distinct {args.backend} candidates over {len(PROBLEMS)} problems")
    print(f"{what}, executor {config.executor}, "
          f"{args.jobs} build jobs, {args.correct_trials} correctness trials, "
          f"at most {args.trials} timed calls ({args.timing_budget_ms:g} ms budget); "
          f"cache {config.cache_dir}", flush=True)
    passes: dict[str, list] = {}
    for name, skip in (("cold", args.warm_only), ("warm", args.cold_only)):
        if skip:
            continue
        try:
            def so_far(records, name=name):
                if args.records:
                    write_records(args.records, {**passes, f"{name}_so_far": records}, args)
            passes[name] = one_pass(f"{name} cache", pairs, config, devices,
                                    root / "locks.trace", so_far, args.corpus)
        except Stopped as e:  # what it finished is kept, under its own name
            passes[f"{name}_stopped"] = e.records
            raise KeyboardInterrupt from None
        finally:
            if args.records:  # after each pass, and a stopped one's finished samples
                write_records(args.records, passes, args)
    cold, warm = passes.get("cold", []), passes.get("warm", [])
    ok = all(r.status == "correct" for r in cold + warm)
    print("all correct" if ok else "NOT all correct (expected with --corpus: it holds "
          "wrong, slow and crashing candidates on purpose)")
    if args.workdir is None:
        shutil.rmtree(root, ignore_errors=True)
    if executor:
        import ray

        ray.shutdown()  # leaves a cluster it joined running; ends one it started
    return 0 if ok else 1


if __name__ == "__main__":
    # A time limit's SIGTERM stops the run as Ctrl-C does: the evaluation kills its
    # children (builds included) on the way out, so a run that follows on the same machine
    # is not timed beside the stopped one's compilers. The passes done are in --records.
    try:
        with sigterm_as_interrupt():
            sys.exit(main())
    except KeyboardInterrupt:
        sys.exit("eval_throughput: stopped (--records holds the passes done and the "
                 "stopped one's finished samples)")
