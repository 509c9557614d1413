"""Where a load_inline build's time goes: each compile of one typical candidate, timed alone.

    python benchmarks/compile_cost.py            # CUDA candidate (main.cpp + cuda.cu)
    python benchmarks/compile_cost.py --cpp      # C++-only candidate (main.cpp)

Builds the candidate once through kb_eval's compiler fronts (kb_eval/eval/schedule/pch.py,
which also makes the precompiled torch/extension.h, and nvcc_front.py), then re-runs each
compile command from the build's ninja file by itself: main.cpp with the slim tier's
precompiled header, with torch/extension.h's and without one, and the CUDA file (nvcc,
which has no precompiled headers) with each of the front's smaller torch/extension.h
(lean, slim) and with the real one. Prints seconds per command.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kb_eval.eval.schedule import nvcc_front, pch  # noqa: E402

DECL = "torch::Tensor run(torch::Tensor x);"
CUDA = r'''
#include <torch/extension.h>
__global__ void twice(const float* x, float* out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i];
}
torch::Tensor run(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int64_t n = x.numel();
    twice<<<(unsigned)((n + 255) / 256), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
'''
CPP = "torch::Tensor run(torch::Tensor x) { return x * 2; }"


def timed(cmd: str, cwd: Path) -> float:
    t0 = time.monotonic()
    subprocess.run(cmd, shell=True, cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cpp", action="store_true", help="a C++-only candidate")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kb_compile_cost_"))
    front = pch.install(root / "pch", os.environ.get("CXX", "c++"))
    nvcc = nvcc_front.real_nvcc()
    if nvcc:
        front.update(nvcc_front.install(root / "nvcc", nvcc))
    os.environ.update(front, TORCH_EXTENSIONS_DIR=str(root / "ext"))
    from torch.utils.cpp_extension import load_inline

    t0 = time.monotonic()
    if args.cpp:
        load_inline("kb_cost_probe", cpp_sources=CPP, functions=["run"])
    else:
        load_inline("kb_cost_probe", cpp_sources=DECL, cuda_sources=CUDA, functions=["run"])
    print(f"first build (makes the precompiled header too): {time.monotonic() - t0:.1f} s")
    build = root / "ext" / "kb_cost_probe"
    commands = subprocess.check_output(["ninja", "-t", "commands"], cwd=build, text=True)
    for cmd in commands.splitlines():
        words = shlex.split(cmd)
        target = words[words.index("-o") + 1] if "-o" in words else "?"
        if target.endswith(".so"):
            print(f"link {target}: {timed(cmd, build):.1f} s")
        elif front["CXX"] in cmd:
            full = f"{pch.SLIM_VAR}=0 {cmd}"
            timed(full, build)  # makes torch's header's PCH (the build made the slim one)
            plain = cmd.replace(front["CXX"], front["KB_PCH_CXX"], 1)
            print(f"{target} with the slim PCH: {timed(cmd, build):.1f} s; torch's PCH: "
                  f"{timed(full, build):.1f} s; no PCH: {timed(plain, build):.1f} s")
        elif "PYTORCH_NVCC" in front and front["PYTORCH_NVCC"] in cmd:
            real = front["KB_NVCC_REAL"]
            tiers = {tier: cmd.replace(front["PYTORCH_NVCC"],
                                       f"{real} -I {front['KB_NVCC_TIERS']}/{tier}", 1)
                     for tier in nvcc_front.TIERS}
            tiers["real"] = cmd.replace(front["PYTORCH_NVCC"], real, 1)
            print(f"{target} with torch/extension.h " + "; ".join(
                f"{tier}: {timed(c, build):.1f} s" for tier, c in tiers.items()))
        else:
            print(f"{target} ({words[0].rsplit('/', 1)[-1]}): {timed(cmd, build):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
