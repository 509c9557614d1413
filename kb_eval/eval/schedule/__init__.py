"""Scheduling, in the main process: builds on CPU workers, one lane per device, the
compiler front, the sweep for escaped processes, what an invocation fixes (context)."""
