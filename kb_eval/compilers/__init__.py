"""Compiler baselines beside eager PyTorch: torch.compile modes and Apache TVM (Relax)."""
