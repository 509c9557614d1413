"""python -m kb_eval.profile: torch.profiler views of problems, solutions and BERT."""
