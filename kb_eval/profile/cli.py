"""python -m kb_eval.profile: where a forward's time goes, operator by operator.

Each configuration is profiled in its own child process and written to <out>/<label>/:
profile.json, report.md, trace.json."""

from __future__ import annotations

import hashlib
import importlib.util
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from kb_eval.cli import (Parser, add_precision_flag, add_quiet_flag, add_results_dir_flag,
                         add_selection_flags, writable_dir)
from kb_eval.errors import UserError
from kb_eval.progress import ProgressBar

TASK = "kb_eval.profile.capture:profile_task"


@dataclass
class Config:
    label: str
    subject: str
    payload: dict = field(default_factory=dict)
    role: str = "reference"  # reference | candidate


def parser(defaults) -> Parser:
    p = Parser(prog="python -m kb_eval.profile",
               description="Profile problems, a candidate solution or a BERT-base encoder "
                           "with torch.profiler: time by category, top aten operators and "
                           "the kernels they launched, launch counts, a Chrome trace. "
                           "Each configuration writes <out>/<label>/{profile.json,report.md,"
                           "trace.json}. Forwards recorded and before them, and where "
                           "solutions' builds are kept: DEFAULTS profile_steps, "
                           "profile_warmup (profile_cpu_steps, profile_cpu_warmup on the CPU) "
                           "and cache_dir in config.py.")
    add_selection_flags(p, defaults.source)
    add_precision_flag(p, defaults.precision)
    _add_candidate_flags(p, defaults)
    _add_bert_flags(p)
    p.add_argument("--device", choices=["cuda", "cpu"], default=None,
                   help="where to profile (default: cuda if a GPU is visible, else cpu)")
    p.add_argument("--out", default="results/profile",
                   help="folder for the per-configuration outputs (default: results/profile)")
    p.add_argument("--timeout", type=float, default=defaults.build_timeout_s,
                   help=f"seconds per configuration, a solution's build included "
                        f"(default: {defaults.build_timeout_s:g})")
    add_quiet_flag(p)
    return p


def _add_candidate_flags(p: Parser, defaults) -> None:
    """The candidate profiled (a file, or a model's answer in a run), and whether the
    reference is profiled beside it."""
    p.add_argument("--solution", metavar="FILE", default=None,
                   help="profile this candidate file (class ModelNew) for the one selected "
                        "problem, with the reference's weights")
    p.add_argument("--model", default=None, metavar="NAME",
                   help="with --run: profile the candidate this model answered in that run "
                        "for the one selected problem (its code under <results-dir>/<model>/"
                        "<run>/code/): the correct answer with the best speedup, else the "
                        "first sample's last turn")
    p.add_argument("--run", default=None, metavar="RUN",
                   help="with --model: the run's folder name, or 'latest' for the run "
                        "written last")
    p.add_argument("--sample", type=int, default=None, metavar="N",
                   help="with --model/--run: profile sample N's last turn instead")
    add_results_dir_flag(p, defaults.results_dir, "where runs live, for --model/--run")
    p.add_argument("--compare", action="store_true",
                   help="with --solution or --model/--run: profile the reference too and write "
                        "<out>/<label>_compare/compare.{json,md}: per-category time and "
                        "launches side by side")


def _add_bert_flags(p: Parser) -> None:
    """The BERT-base encoder profiled instead of problems, and its shapes."""
    p.add_argument("--bert", action="store_true",
                   help="profile a BERT-base encoder at every --batch-sizes x --seq-lens "
                        "instead of problems")
    p.add_argument("--bert-model", choices=["auto", "layer", "transformers"], default="auto",
                   help="with --bert: 'layer' is our bundled encoder layer, 'transformers' "
                        "a 12-layer BertModel with random weights (needs transformers; "
                        "nothing is downloaded); 'auto' both when transformers is installed, "
                        "else the layer (default: auto)")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 16], metavar="B",
                   help="with --bert: batch sizes (default: 1 8 16)")
    p.add_argument("--seq-lens", type=int, nargs="+", default=[128, 512], metavar="S",
                   help="with --bert: sequence lengths (default: 128 512)")


def check_args(args) -> None:
    if (args.model is None) != (args.run is None):
        raise UserError("--model and --run go together: the run of that model to take the "
                        "candidate from")
    if args.model and args.solution:
        raise UserError("give either --solution FILE or --model/--run, not both")
    if args.sample is not None and not args.model:
        raise UserError("--sample needs --model and --run")
    if args.compare and not (args.solution or args.model):
        raise UserError("--compare needs --solution FILE or --model/--run (the candidate to "
                        "put beside the reference)")
    if args.bert and (args.solution or args.model):
        raise UserError("--bert profiles the bundled encoder: it takes no --solution or "
                        "--model/--run")
    if args.solution and not Path(args.solution).is_file():
        raise UserError(f"--solution {args.solution}: no such file")
    for flag, values in (("--batch-sizes", args.batch_sizes), ("--seq-lens", args.seq_lens)):
        if any(v < 1 for v in values):
            raise UserError(f"{flag} must all be at least 1 (got {values})")
    if args.bert and args.bert_model == "transformers" and not _has_transformers():
        raise UserError("--bert-model transformers needs transformers: pip install "
                        "'kb-eval[profile]'")


def _has_transformers() -> bool:
    return importlib.util.find_spec("transformers") is not None


def bert_configs(args) -> list[Config]:
    models = {"auto": ["layer"] + (["transformers"] if _has_transformers() else []),
              "layer": ["layer"], "transformers": ["transformers"]}[args.bert_model]
    configs = []
    for model in models:
        kind = "bert-layer" if model == "layer" else "bert-hf"
        for b in args.batch_sizes:
            for s in args.seq_lens:
                configs.append(Config(label=f"{kind}_b{b}_s{s}_{args.precision}",
                                      subject=f"{kind} B={b} S={s}",
                                      payload={"kind": kind, "batch": b, "seq": s}))
    return configs


def problem_configs(args, problems) -> list[Config]:
    if args.solution and len(problems) != 1:
        raise UserError(f"--solution is profiled against one problem; the selection has "
                        f"{len(problems)}: narrow it with --level/--problems")
    solution = None
    if args.solution:
        solution = Path(args.solution).read_text(encoding="utf-8", errors="replace")
        if "ModelNew" not in solution:
            raise UserError(f"--solution {args.solution} defines no class ModelNew")
    configs = []
    for p in problems:
        base = {"kind": "problem", "code": p.code}
        label = f"{p.slug}_{_safe(p.name)}_{args.precision}"
        if solution is None or args.compare:
            configs.append(Config(label=label, subject=f"{p.key} {p.name} (reference)",
                                  payload=base))
        if solution is not None:
            configs.append(Config(label=f"{label}_candidate", role="candidate",
                                  subject=f"{p.key} {p.name}: {Path(args.solution).name}",
                                  payload={**base, "solution": solution}))
    return configs


def run_configs(configs: list[Config], args, device: str, defaults,
                isolated) -> dict[str, dict]:
    """Profile each configuration in a child; a failed one is reported and skipped."""
    out = Path(args.out).expanduser()
    gpu = device == "cuda"
    steps = defaults.profile_steps if gpu else defaults.profile_cpu_steps
    warmup = defaults.profile_warmup if gpu else defaults.profile_cpu_warmup
    results = {}
    from kb_eval.profile.write import write_profile
    with tempfile.TemporaryDirectory(prefix="kb_profile_") as tmp:
        for i, c in enumerate(ProgressBar(configs, desc="profile", unit="config",
                                          disable=args.quiet)):
            payload = {**c.payload, "precision": args.precision, "steps": steps,
                       "warmup": warmup, "out_dir": str(out / c.label),
                       "device": "cuda:0" if device == "cuda" else "cpu"}
            outcome = isolated(TASK, payload, workdir=Path(tmp) / str(i),
                               timeout_s=args.timeout, mem_limit_mb=defaults.mem_limit_mb,
                               env=_env(device, c, defaults.cache_dir))
            if not outcome.ok:
                ProgressBar.write(f"{c.label}: failed: {outcome.describe()}")
                continue
            config = {"label": c.label, "subject": outcome.result.pop("model", c.subject),
                      "role": c.role, "device": device, "precision": args.precision}
            results[c.label] = write_profile(out / c.label, config, outcome.result)
    return results


def _env(device: str, config: Config, cache_dir: Path) -> dict:
    env = {"CUDA_VISIBLE_DEVICES": ""} if device == "cpu" else {}
    solution = config.payload.get("solution")
    if solution is not None:  # a build per source, as the eval keeps them
        digest = hashlib.sha256(solution.encode()).hexdigest()[:16]
        env["TORCH_EXTENSIONS_DIR"] = str(
            Path(cache_dir).expanduser().resolve() / "profile-builds" / digest)
    return env


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)[:48]


def check_out(args) -> None:
    writable_dir(args.out, "--out")
