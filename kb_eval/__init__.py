"""kb-eval: a KernelBench-style evaluator for LLM-generated GPU kernels."""

__version__ = "0.1.0"
