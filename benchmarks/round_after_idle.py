"""Is a reference timed one call per round after an idle wait (as a paired round is) slower
than in a hot loop, and does GPU work queued ahead of the start event close the gap?
Needs CUDA; prints one line per BERT problem and precision:

    python benchmarks/round_after_idle.py

"flush only" is the timer as it is; "+sleep" queues ~0.2 ms more GPU work (a spin) ahead
of each start event, so that the host's launches are hidden unless they take longer.
"""

from __future__ import annotations

import statistics
import time

import torch

from kb_eval import timing
from kb_eval.harness import inputs_for, load_problem, reference_model

PROBLEMS = ["level1/9_gelu_b64s64", "level1/8_layernorm_b64s64",
            "level2/3_attention_output_b64s64", "level2/4_ffn_output_gelu_b64s64",
            "level2/1_attention_output_b16s512"]
FLUSH_ONLY = timing._CudaTimer._pre_queue


def flush_and_sleep(timer) -> None:
    FLUSH_ONLY(timer)
    torch.cuda._sleep(300_000)  # cycles: ~0.15-0.2 ms at the H100's clocks


def hot_and_after_idle(model, args) -> tuple[float, float]:
    """Median ms of 30 calls in a row, and of 20 rounds of one call after a 30 ms wait."""
    for i in range(5):
        model(*args(-1 - i))
    hot = timing.time_calls(model, range(31), timing.timer_for(torch.device("cuda")), args)[1:]
    rounds = []
    for r in range(20):
        time.sleep(0.03)  # the server waits while the candidate runs its round
        timer = timing.timer_for(torch.device("cuda"))
        model(*args(-100 - r))  # each round's untimed first call
        torch.cuda.synchronize()
        rounds += timing.time_calls(model, [r], timer, args, collect=False)
    return statistics.median(hot), statistics.median(rounds)


def main() -> None:
    device = torch.device("cuda")
    for name in PROBLEMS:
        code = open(f"reference_kernels/problems/bert/{name}.py").read()
        for precision in ("fp32", "bf16"):
            module, init = load_problem(code, precision, device)
            model = reference_model(module, init, precision, device)
            args = lambda i: inputs_for(module, 1, ("timing", i), precision, device)  # noqa: E731
            line = f"{name:36s} {precision}:"
            for label, pre_queue in (("flush only", FLUSH_ONLY), ("+sleep", flush_and_sleep)):
                timing._CudaTimer._pre_queue = pre_queue
                with torch.no_grad():
                    hot, idle = hot_and_after_idle(model, args)
                line += f" | {label} hot {hot:.4f} rounds {idle:.4f} ({idle / hot:.2f}x)"
            timing._CudaTimer._pre_queue = FLUSH_ONLY
            print(line, flush=True)


if __name__ == "__main__":
    main()
