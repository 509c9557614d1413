"""kb-eval configuration: your models (OpenAI-compatible endpoints) and default settings.

This is your file. Add a model by appending a dict to MODELS; change a default in
DEFAULTS. Everything is validated when a command starts: a wrong value stops it with one
line naming the field. Keys are read from the environment variable named by
`api_key_env`, never from this file.
"""

MODELS = [
    # name: what you pass to --model; model: the id the endpoint expects. Prices are USD per
    # million tokens (cache-miss input), for the cost column; check your provider's price list
    # (DeepSeek's below: V3.2 prices of late 2025). reasoning=True: no temperature/top_p sent,
    # and the model's thinking is stored apart from its answer.
    dict(name="deepseek-chat", base_url="https://api.deepseek.com", model="deepseek-chat",
         api_key_env="DEEPSEEK_API_KEY", temperature=0.0, max_tokens=8192,
         max_concurrency=16, price_in_per_mtok=0.28, price_out_per_mtok=0.42),
    dict(name="deepseek-reasoner", base_url="https://api.deepseek.com",
         model="deepseek-reasoner", api_key_env="DEEPSEEK_API_KEY", reasoning=True,
         max_tokens=32768, max_concurrency=16, timeout_s=900,
         price_in_per_mtok=0.28, price_out_per_mtok=0.42),
    dict(name="gpt-4.1", base_url="https://api.openai.com/v1", model="gpt-4.1",
         api_key_env="OPENAI_API_KEY", temperature=0.0, max_tokens=16384,
         max_concurrency=8, price_in_per_mtok=2.0, price_out_per_mtok=8.0),
    # A local vLLM / SGLang server, no key needed, e.g.
    #   vllm serve Qwen/Qwen2.5-Coder-32B-Instruct --served-model-name local-model --port 8000
    # (for a reasoning model add vLLM's --reasoning-parser and set reasoning=True here).
    dict(name="local-vllm", base_url="http://127.0.0.1:8000/v1", model="local-model",
         api_key_env=None, temperature=0.0, max_tokens=8192, max_concurrency=32,
         timeout_s=1200),
]

DEFAULTS = dict(
    source="bert",            # bundled suite, KernelBench-layout folder, or hf[:repo-or-dir]
    backend="auto",           # cuda | triton | cpp; auto = cuda with a GPU, cpp without
    precision="fp32",         # fp32 (TF32 off) | fp16 | bf16
    results_dir="results",
    cache_dir=".cache/kb_eval",  # build cache and scratch (Ray: a path every node sees)
    warmup=5,                 # untimed calls before timing (at most, with a timing budget)
    trials=100,               # timed calls (GPU)
    cpu_trials=5,             # timed calls for cpp candidates on the CPU (CPU runs are slow)
    cpu_warmup=1,             # untimed calls before those
    correct_trials=5,         # correctness trials, each with fresh inputs
    baseline_visits=1,        # kb_eval.baseline on a GPU: children per problem, a sweep apart
    build_timeout_s=600,      # seconds per build
    run_timeout_s=300,        # seconds per candidate run
    mem_limit_mb=16000,       # host memory per child process
    # Knobs without a flag (docs/FLAGS.md, "Settings in config.py"), e.g.: lane_depth=3
    # (children in flight per device; unset: 3 on a GPU, 1 on a CPU), cpu_lanes=1,
    # load_budget_s=90, call_budget_s=30, recheck_timed=8, timing_budget_ms=100,
    # count_launches=None (kernel launches per forward; None: on the CPU only),
    # profile_steps=5, profile_warmup=3, profile_cpu_steps=2, profile_cpu_warmup=1.
)
