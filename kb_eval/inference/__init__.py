"""Inference: prompt -> OpenAI-compatible endpoint (or a built-in model) -> code.

One job per module, each with a small interface (see each module's docstring):

    endpoints.py   ModelEndpoint (config.py's MODELS entries), resolve_model, check_api_key
    completion.py  Completion: what every model returns
    client.py      ChatClient: the openai SDK + tenacity retries + per-model concurrency limit
    models.py      Model protocol `generate(messages, sample_index, ...) -> Completion`;
                   OpenAIModel, ReferenceModel (offline), CachedModel wrapper; get_model()
    cache.py       ResponseCache: one JSON file per request under the run folder
    prompts.py     build_prompt, build_feedback, next_turn_messages (templates/ holds the words)
    extract.py     extract_code: the final fenced block defining class ModelNew
    device.py      DeviceInfo (specs shown in prompts) and detect_device_info()
"""
