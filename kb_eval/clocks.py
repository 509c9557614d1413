"""The clocks the evaluator's child-side code reads, bound at import (before any candidate
code loads). A candidate that replaces `time.perf_counter` and the like changes only what
its own code sees: our timers, waits and budgets keep the real clocks, and the integrity
check (eval/child/integrity.py) reports the replacement."""

from time import (CLOCK_PROCESS_CPUTIME_ID, clock_gettime_ns, monotonic, perf_counter,
                  perf_counter_ns, sleep, thread_time_ns)

__all__ = ["CLOCK_PROCESS_CPUTIME_ID", "clock_gettime_ns", "monotonic", "perf_counter",
           "perf_counter_ns", "sleep", "thread_time_ns"]
