"""python -m kb_eval.profile (kb_eval/profile/cli.py says what it writes)."""

from __future__ import annotations

import sys
from pathlib import Path

from kb_eval.cli import run_cli
from kb_eval.errors import UserError
from kb_eval.profile.cli import (bert_configs, check_args, check_out, parser,
                                 problem_configs, run_configs)
from kb_eval.settings import load_settings


def main(argv: list[str] | None = None) -> int:
    d = load_settings().defaults
    args = parser(d).parse_args(argv)
    check_args(args)
    import torch  # after the flags: --help and flag errors answer without it
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda asked for, but torch sees no CUDA GPU")
    check_out(args)
    if args.bert:
        configs = bert_configs(args)
    else:
        from kb_eval.problems import load_problems
        problems = load_problems(args.source, args.level, args.problems, args.name)
        if args.model:
            args.solution = _run_solution(args, problems)
        configs = problem_configs(args, problems)
    from kb_eval.isolation import run_isolated
    results = run_configs(configs, args, device, d, run_isolated)
    if args.compare:
        _compare(configs, results, Path(args.out).expanduser())
    _print_summary(configs, results)
    return 0 if len(results) == len(configs) else 1


def _run_solution(args, problems) -> str:
    """--model/--run: the code file of the run's answer for the one selected problem."""
    from kb_eval.profile.from_run import solution_from_run
    if len(problems) != 1:
        raise UserError(f"--model/--run profile one problem's answer; the selection has "
                        f"{len(problems)}: narrow it with --level/--problems")
    path, record = solution_from_run(Path(args.results_dir), args.model, args.run,
                                     problems[0].key, args.sample)
    print(f"{args.model}/{args.run}: {problems[0].key} sample {record.get('sample')} turn "
          f"{record.get('turn')} ({record.get('status')}) -> {path}")
    return str(path)


def _compare(configs, results, out: Path) -> None:
    from kb_eval.profile.write import write_compare
    ref = next((c for c in configs if c.role == "reference"), None)
    cand = next((c for c in configs if c.role == "candidate"), None)
    if ref is None or cand is None or ref.label not in results or cand.label not in results:
        print("compare: skipped (a side failed)", file=sys.stderr)
        return
    label = f"{ref.label}_compare"
    (out / label).mkdir(parents=True, exist_ok=True)
    write_compare(out / label, ref.label, results[ref.label], results[cand.label])
    print(f"compare -> {out / label / 'compare.md'}")


def _print_summary(configs, results) -> None:
    for c in configs:
        r = results.get(c.label)
        if r is None:
            print(f"{c.label}: failed")
            continue
        shares = sorted(r["category_share_pct"].items(), key=lambda kv: -kv[1])[:3]
        top = ", ".join(f"{k} {v:.0f}%" for k, v in shares)
        print(f"{c.label}: {r['total_ms']:.4g} ms/forward ({r['time_kind']}), "
              f"{r['kernel_launches']:g} launches; {top}")


if __name__ == "__main__":
    sys.exit(run_cli(main))
