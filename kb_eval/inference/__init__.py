"""Inference: prompt (prompts.py) -> OpenAI-compatible endpoint or built-in model
(models.py, client.py, cache.py) -> code (extract.py)."""
