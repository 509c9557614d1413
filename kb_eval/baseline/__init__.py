"""Baseline stage: time the PyTorch reference of every selected problem."""
