"""GELU and LayerNorm(768) kernel variants against PyTorch eager on a CUDA GPU (issue 61):
which reach 85 % of DRAM bandwidth on the bert/level1 shapes, and whether a gap is the
kernel or the fixed cost around one call.

Builds memory_bound_variants.cu (every variant, no torch headers) and a small C++ entry
into one extension, then for each shape and dtype times eager, torch's copy (`clone`) and
every variant (the `cur` ones copy the solutions' kernels before the winners were ported:
gelu.py now runs `t128_u1` (fp32) and `poly` (bf16), layernorm.py `w8_occ4_nc_cs` (fp32)
and `persist8_nc_cs` (bf16); `cur/heavy` also the C++ entry (device guard, .contiguous(),
empty_like), the others go through a lighter entry):
  call     as benchmarks/reference_kernels.py: one call from Python, L2 flushed by zeroing
           a 2x-L2 buffer, --cover-ms of GPU spin queued before the start event (kb_eval's
           launch cover: the host's path to the kernel is not timed), CUDA events, median
           of --trials;
  idle     the same, but the host waits for the flush and records the start event on an
           idle GPU (no cover): the host's path from there to the kernel is timed;
  rdflush  as call, L2 flushed by reading that buffer instead (no dirty lines left in L2
           for the call to write back);
  graph    kernel only: N calls on N input sets (N x bytes >= 4x L2, so each input is
           cold) captured in one CUDA graph, replay time / N;
  host     host microseconds per call (200 calls, no synchronize between).
call, idle and rdflush run --rounds interleaved rounds (median of the round medians).
%SOL = bytes (input read + output written once) / time / --bw. Errors: max |ours - eager|,
elements differing from eager, max |out - fp64 reference| (`err64`); ok: |d| <= tol (1 +
|eager|), tol 1e-5 in fp32, 1e-2 in bf16.

    python benchmarks/memory_bound_variants.py [--ops gelu,layernorm] [--dtypes fp32,bf16]
        [--variants cur,poly,...] [--trials 100] [--rounds 2] [--cover-ms 0.25] [--json FILE]
    python benchmarks/memory_bound_variants.py --print-sources DIR   # kernels.cu, entry.cpp
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

CU_FILE = Path(__file__).resolve().with_suffix(".cu")
SHAPES = {"gelu": [(16, 512, 3072), (64, 64, 3072)], "layernorm": [(16, 512, 768), (64, 64, 768)]}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
EPS = 1e-12
FUNCTIONS = ["variant_names", "ew_heavy", "ew_light", "ln_heavy", "ln_light"]
# Timed call modes: (L2 flush, then "cover": the launch cover is queued; "sync": the host
# waits for the flush, so the start event is recorded on an idle GPU).
MODES = {"call": ("zero", "cover"), "idle": ("zero", "sync"), "rdflush": ("read", "cover")}

CPP_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <string>

int mbv_ew_count();
const char* mbv_ew_name(int i);
cudaError_t mbv_ew_launch(int i, bool bf16, const void* x, void* y, size_t n, cudaStream_t s);
int mbv_ln_count();
const char* mbv_ln_name(int i);
cudaError_t mbv_ln_launch(int i, bool bf16, const void* x, const void* g, const void* b, void* out, int M,
                          float eps, cudaStream_t s);

std::string variant_names(bool ln) {
  std::string s;
  const int n = ln ? mbv_ln_count() : mbv_ew_count();
  for (int i = 0; i < n; ++i) {
    if (i) s += ",";
    s += ln ? mbv_ln_name(i) : mbv_ew_name(i);
  }
  return s;
}

// As the shipped gelu.py's entry: checks, a device guard, .contiguous(), empty_like.
torch::Tensor ew_heavy(torch::Tensor x, int64_t v) {
  const auto dt = x.scalar_type();
  TORCH_CHECK(x.is_cuda() && (dt == at::kFloat || dt == at::kBFloat16), "x: CUDA fp32 or bf16");
  const c10::cuda::CUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  if (xc.numel() == 0) return y;
  const cudaError_t err = mbv_ew_launch((int)v, dt == at::kBFloat16, xc.data_ptr(), y.data_ptr(), (size_t)xc.numel(),
                                        c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "launch: ", cudaGetErrorString(err));
  return y;
}

// Lighter: flag checks only (contiguous fp32/bf16 on the current device), no guard, one
// at::empty with x's options.
torch::Tensor ew_light(const torch::Tensor& x, int64_t v) {
  const auto dt = x.scalar_type();
  TORCH_CHECK(x.is_contiguous() && (dt == at::kFloat || dt == at::kBFloat16), "x: contiguous fp32 or bf16");
  auto y = at::empty(x.sizes(), x.options());
  const cudaError_t err = mbv_ew_launch((int)v, dt == at::kBFloat16, x.data_ptr(), y.data_ptr(), (size_t)x.numel(),
                                        c10::cuda::getCurrentCUDAStream(x.device().index()));
  TORCH_CHECK(err == cudaSuccess, "launch: ", cudaGetErrorString(err));
  return y;
}

// As the shipped layernorm.py's entry.
torch::Tensor ln_heavy(torch::Tensor x, c10::optional<torch::Tensor> gamma, c10::optional<torch::Tensor> beta,
                       double eps, int64_t v) {
  const auto dt = x.scalar_type();
  TORCH_CHECK(x.is_cuda() && (dt == at::kFloat || dt == at::kBFloat16), "x: CUDA fp32 or bf16");
  TORCH_CHECK(x.size(-1) == 768, "rows of 768 only");
  const c10::cuda::CUDAGuard guard(x.device());
  auto xc = x.contiguous();
  TORCH_CHECK(gamma.has_value() && beta.has_value(), "gamma and beta");
  TORCH_CHECK(gamma->scalar_type() == dt && gamma->numel() == 768, "gamma");
  TORCH_CHECK(beta->scalar_type() == dt && beta->numel() == 768, "beta");
  auto gc = gamma->contiguous(), bc = beta->contiguous();
  auto out = torch::empty_like(xc);
  const int64_t M = xc.numel() / 768;
  if (M == 0) return out;
  TORCH_CHECK(M < (int64_t)1 << 30, "too many rows");
  const cudaError_t err = mbv_ln_launch((int)v, dt == at::kBFloat16, xc.data_ptr(), gc.data_ptr(), bc.data_ptr(),
                                        out.data_ptr(), (int)M, (float)eps, c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "layernorm launch: ", cudaGetErrorString(err));
  return out;
}

torch::Tensor ln_light(const torch::Tensor& x, const torch::Tensor& gamma, const torch::Tensor& beta, double eps,
                       int64_t v) {
  const auto dt = x.scalar_type();
  TORCH_CHECK(x.is_contiguous() && (dt == at::kFloat || dt == at::kBFloat16) && x.size(-1) == 768, "x");
  auto out = at::empty(x.sizes(), x.options());
  const cudaError_t err = mbv_ln_launch((int)v, dt == at::kBFloat16, x.data_ptr(), gamma.data_ptr(), beta.data_ptr(),
                                        out.data_ptr(), (int)(x.numel() / 768), (float)eps,
                                        c10::cuda::getCurrentCUDAStream(x.device().index()));
  TORCH_CHECK(err == cudaSuccess, "layernorm launch: ", cudaGetErrorString(err));
  return out;
}
"""

CUDA_FLAGS = ["-O3", "--use_fast_math", "-gencode=arch=compute_90a,code=sm_90a"]


def build(verbose: bool = False):
    from torch.utils.cpp_extension import load_inline
    t0 = time.monotonic()
    ext = load_inline(name="kb_memory_bound_variants", cpp_sources=CPP_SRC, cuda_sources=CU_FILE.read_text(),
                      functions=FUNCTIONS, extra_cuda_cflags=CUDA_FLAGS, no_implicit_headers=True, verbose=verbose)
    print(f"built in {time.monotonic() - t0:.1f} s", flush=True)
    return ext


def print_sources(folder: Path) -> None:
    """kernels.cu and entry.cpp as load_inline compiles them (entry.cpp with its bindings)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernels.cu").write_text(CU_FILE.read_text())
    binds = "".join(f'  m.def("{f}", {f}, "{f}");\n' for f in FUNCTIONS)
    (folder / "entry.cpp").write_text(f"{CPP_SRC}\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n{binds}}}\n")
    print(f"wrote {folder}/kernels.cu and {folder}/entry.cpp; nvcc flags: {' '.join(CUDA_FLAGS)}")


class Timer:
    """CUDA-event timing of one call after an L2 flush and an optional launch cover, as
    kb_eval.timing does it, and of kernels captured in a CUDA graph."""

    def __init__(self, cover_ms: float):
        props = torch.cuda.get_device_properties(0)
        self.l2 = props.L2_cache_size
        self.buf = torch.empty(2 * self.l2 // 8 * 8, dtype=torch.uint8, device="cuda")
        self.words = self.buf.view(torch.int64)
        self.start, self.end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        self.spin(0.05)
        self.cover = round(cover_ms * self._sleep_rate()) if cover_ms > 0 else 0

    def spin(self, seconds: float) -> None:
        """GPU work so the clocks leave idle before anything is timed."""
        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            self.buf.zero_()
            torch.cuda.synchronize()

    def _sleep_rate(self) -> float:
        rates = []
        for _ in range(3):
            self.start.record()
            torch.cuda._sleep(1_000_000)
            self.end.record()
            self.end.synchronize()
            rates.append(1_000_000 / max(self.start.elapsed_time(self.end), 1e-3))
        return statistics.median(rates)

    def _pre(self, flush: str, then: str = "cover") -> None:
        if flush == "zero":
            self.buf.zero_()
        elif flush == "read":
            torch.amax(self.words)
        if then == "sync":
            torch.cuda.synchronize()
        elif self.cover:
            torch.cuda._sleep(self.cover)

    def call_ms(self, fn, trials: int, flush: str, then: str, warmup: int = 10) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(trials + 1):  # the first is dropped, as kb_eval does
            self._pre(flush, then)
            self.start.record()
            out = fn()
            self.end.record()
            self.end.synchronize()
            times.append(self.start.elapsed_time(self.end))
            del out
        return statistics.median(times[1:])

    def graph_ms(self, calls: list, replays: int = 5) -> float:
        """Per call: all `calls` captured back to back in one graph (outputs kept alive,
        so each writes its own buffer), median over replays."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = [c() for c in calls]
        graph.replay()
        times = []
        for _ in range(replays):
            self._pre("read")
            self.start.record()
            graph.replay()
            self.end.record()
            self.end.synchronize()
            times.append(self.start.elapsed_time(self.end) / len(calls))
        del graph, outs
        return statistics.median(times)


def host_us(fn, n: int = 200) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def candidates(op: str, ext, names: list[str], wanted: set[str], params) -> list[tuple[str, object, bool]]:
    """(label, make(x) -> callable, is the op itself) for eager, torch's copy, our copy kernel
    and every variant (all but `cur/heavy` through the light entry); eager comes first."""
    copy_id = ext.variant_names(False).split(",").index("copy")
    chosen = [(i, n) for i, n in enumerate(names) if not wanted or n in wanted or n == "cur"]
    cur = names.index("cur")
    if op == "gelu":
        out = [("eager", lambda x: lambda: F.gelu(x), True),
               ("cur/heavy", lambda x: lambda: ext.ew_heavy(x, cur), True)]
        out += [(n, lambda x, i=i: lambda: ext.ew_light(x, i), not n.startswith("copy")) for i, n in chosen]
    else:
        g, b = params
        out = [("eager", lambda x: lambda: F.layer_norm(x, (768,), g, b, EPS), True),
               ("cur/heavy", lambda x: lambda: ext.ln_heavy(x, g, b, EPS, cur), True),
               ("copy", lambda x: lambda: ext.ew_light(x, copy_id), False)]
        out += [(n, lambda x, i=i: lambda: ext.ln_light(x, g, b, EPS, i), True) for i, n in chosen]
    return out + [("torch clone", lambda x: lambda: x.clone(), False)]


def errors(out, ref, ref64, dtype) -> dict:
    d = (out.float() - ref.float()).abs()
    tol = TOL[dtype]
    return {"maxerr": float(d.max()), "ndiff": int((out != ref).sum()),
            "err64": float((out.double() - ref64).abs().max()),
            "ok": bool((d <= tol * (1 + ref.float().abs())).all())}


def case_inputs(op: str, shape: tuple, dtype, n_sets: int):
    """n_sets inputs, LayerNorm's (gamma, beta) or None, and the fp64 reference on the first."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    xs = [torch.randn(shape, device="cuda", dtype=dtype, generator=gen) for _ in range(n_sets)]
    if op == "gelu":
        return xs, None, F.gelu(xs[0].double())
    params = ((1 + 0.1 * torch.randn(768, device="cuda", generator=gen)).to(dtype),
              (0.1 * torch.randn(768, device="cuda", generator=gen)).to(dtype))
    return xs, params, F.layer_norm(xs[0].double(), (768,), params[0].double(), params[1].double(), EPS)


def one_time(fn, label: str, what: str, measure) -> float:
    """measure(fn), or NaN (reported) when it raised: one variant must not end the run."""
    try:
        return measure(fn)
    except Exception as e:  # noqa: BLE001
        print(f"  {label}: {what} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
        torch.cuda.synchronize()
        return float("nan")


def run_case(op: str, shape: tuple, dt_name: str, ext, names, args, timer: Timer) -> list[dict]:
    dtype = DTYPES[dt_name]
    nbytes = 2 * math.prod(shape) * torch.tensor([], dtype=dtype).element_size()
    n_sets = max(args.graph_calls, math.ceil(4 * timer.l2 / nbytes))
    xs, params, ref64 = case_inputs(op, shape, dtype, n_sets)
    cands = candidates(op, ext, names, set(args.variants.split(",")) - {""}, params)
    ref = cands[0][1](xs[0])()
    rows, live = [], []
    for label, make, is_op in cands:
        row = {"op": op, "shape": list(shape), "dtype": dt_name, "variant": label,
               "bytes": nbytes, "graph_calls": n_sets, **{m: [] for m in MODES}}
        try:
            out = make(xs[0])()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - reported, the others go on
            print(f"  {label}: first call failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        row.update(errors(out, ref, ref64, dtype) if is_op else {})
        del out
        row["graph_us"] = 1e3 * one_time([make(x) for x in xs], label, "graph", timer.graph_ms)
        row["host_us"] = one_time(make(xs[0]), label, "host", host_us)
        rows.append(row)
        live.append((label, make))
    timer.spin(0.02)
    for _ in range(args.rounds):  # rounds interleave all candidates, so a slow phase hits each alike
        for (label, make), row in zip(live, rows):
            fn = make(xs[0])
            for mode, (flush, then) in MODES.items():
                row[mode].append(1e3 * one_time(fn, label, mode,
                                                lambda f: timer.call_ms(f, args.trials, flush, then)))
    for row in rows:
        for mode in MODES:
            row[f"{mode}_rounds"] = row.pop(mode)
            row[f"{mode}_us"] = statistics.median(row[f"{mode}_rounds"])
    del xs
    torch.cuda.empty_cache()
    return rows


def show(rows: list[dict], bw: float) -> None:
    eager, nbytes = rows[0], rows[0]["bytes"]
    print(f"\n== {eager['op']} {eager['dtype']} x{tuple(eager['shape'])}: {nbytes / 1e6:.1f} MB moved, floor "
          f"{nbytes / bw * 1e6:.1f} us at {bw / 1e12:.2f} TB/s; graph of {eager['graph_calls']} calls")
    print(f"{'variant':20s} {'call us':>8s} {'GB/s':>5s} {'%SOL':>5s} {'x eag':>5s} | {'idle us':>7s} | "
          f"{'rdfl us':>7s} {'%SOL':>5s} | {'graph us':>8s} {'GB/s':>5s} {'%SOL':>5s} {'x eag':>5s} | "
          f"{'host us':>7s} | {'max|d|':>8s} {'ndiff':>8s} {'err64':>8s} ok")

    def sol(us: float) -> float:
        return 100 * nbytes / (us * 1e-6) / bw

    for r in rows:
        err = (f"{r['maxerr']:8.1e} {r['ndiff']:8d} {r['err64']:8.1e} {'yes' if r['ok'] else 'NO'}"
               if "maxerr" in r else f"{'-':>8s} {'-':>8s} {'-':>8s} -")
        call, graph = r["call_us"], r["graph_us"]
        print(f"{r['variant'][:20]:20s} {call:8.1f} {nbytes / call / 1e3:5.0f} {sol(call):5.1f} "
              f"{eager['call_us'] / call:5.2f} | {r['idle_us']:7.1f} | {r['rdflush_us']:7.1f} "
              f"{sol(r['rdflush_us']):5.1f} | {graph:8.1f} {nbytes / graph / 1e3:5.0f} {sol(graph):5.1f} "
              f"{eager['graph_us'] / graph:5.2f} | {r['host_us']:7.1f} | {err}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", default="gelu,layernorm")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--variants", default="", help="comma-separated variant names (default: all); "
                   "eager, torch clone, copy and cur/heavy are always timed")
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--cover-ms", type=float, default=0.25, help="GPU spin before each start event (kb_eval: 0.25)")
    p.add_argument("--graph-calls", type=int, default=20, help="calls per graph (at least 4x L2 of data)")
    p.add_argument("--bw", type=float, default=4.39e12, help="DRAM bandwidth for %%SOL, bytes/s")
    p.add_argument("--json", default="", help="write all rows here")
    p.add_argument("--print-sources", default="", help="write the sources to this folder and stop")
    p.add_argument("--verbose-build", action="store_true")
    args = p.parse_args()
    if args.print_sources:
        print_sources(Path(args.print_sources))
        return
    if not torch.cuda.is_available():
        sys.exit("memory_bound_variants.py needs a CUDA GPU (--print-sources does not)")
    t0 = time.monotonic()
    props = torch.cuda.get_device_properties(0)
    print(f"{props.name}, {props.multi_processor_count} SMs, L2 {props.L2_cache_size / 2**20:.0f} MiB, "
          f"torch {torch.__version__}, cover {args.cover_ms} ms, {args.trials} trials x {args.rounds} rounds", flush=True)
    ext = build(args.verbose_build)
    names = {"gelu": ext.variant_names(False).split(","), "layernorm": ext.variant_names(True).split(",")}
    timer, rows = Timer(args.cover_ms), []
    with torch.no_grad():
        for op in args.ops.split(","):
            for shape in SHAPES[op]:
                for dt in args.dtypes.split(","):
                    case = run_case(op, shape, dt, ext, names[op], args, timer)
                    show(case, args.bw)
                    rows += case
    print(f"\ndone in {time.monotonic() - t0:.1f} s", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
