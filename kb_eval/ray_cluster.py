"""The Ray executor's flag (--ray-address) and joining the cluster. Light on purpose (no
torch, no kb_eval.eval, Ray imported only when asked for): --help and flag errors answer
at once.
The executor itself is kb_eval/eval/schedule/ray_executor.py."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import threading

from kb_eval.errors import UserError

NAMESPACE = "kb_eval"  # our actors' names live here
INSTALL = "pip install 'kb-eval[ray]' (ray==2.60.0)"


def add_executor_flags(p) -> None:
    """--ray-address (kb_eval.eval and kb_eval.run): given, the run goes to Ray."""
    g = p.add_argument_group("one machine or a Ray cluster")
    g.add_argument("--ray-address", default=None, metavar="ADDR", type=_address,
                   help="run on a Ray cluster: builds as Ray tasks and each GPU (cpp: each "
                        "node's CPU) as a Ray actor, this process keeping the secret and "
                        "writing the results. ADDR: the head's host:port (`ray start --head` "
                        "prints it), auto ($RAY_ADDRESS, else the cluster started last on "
                        "this machine) or local (a new one-machine cluster for this run). Needs "
                        f"{INSTALL} and DEFAULTS cache_dir on a path every node sees "
                        "(default: no Ray, builds and device lanes on this machine)")


def _address(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("give the head's host:port, auto or local")
    return text.strip()


def executor_config(args) -> dict:
    """EvalConfig fields from the flags; with Ray, joins the cluster now, so that Ray
    missing or a wrong address costs one line before any work."""
    if args.ray_address is None:
        return {}
    if getattr(args, "gpus", None):
        raise UserError("--gpus picks GPUs of this machine; with --ray-address every GPU "
                        "of the cluster gets a lane")
    connect(args.ray_address)
    return {"executor": "ray", "ray_address": args.ray_address}


def connect(address: str | None) -> bool:
    """Join the Ray cluster at `address`, or start one (local, or no address and no
    $RAY_ADDRESS); True when this call started it. UserError when Ray is missing or the
    cluster cannot be reached."""
    try:
        import ray
    except ImportError:
        raise UserError(f"the Ray executor (--ray-address) needs Ray: {INSTALL}") from None
    if ray.is_initialized():
        return False
    shown = f"--ray-address {address}"
    if not address and os.environ.get("RAY_ADDRESS"):
        address = os.environ["RAY_ADDRESS"]
        shown = f"RAY_ADDRESS={address}"
    if address and address not in ("auto", "local"):
        _check_reachable(address, shown)
    # ray.init replaces the driver's SIGTERM handler with one that exits at once (code
    # 15); ours (kb_eval.cli.run_cli) stops the run as Ctrl-C does, the same as locally.
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        if address and address != "local":
            ray.init(address=address, namespace=NAMESPACE, logging_level=logging.WARNING)
        else:  # a new cluster on this machine
            ray.init(address=address, namespace=NAMESPACE, include_dashboard=False,
                     logging_level=logging.WARNING)
        if callable(sigterm) and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, sigterm)
    except Exception as e:  # noqa: BLE001 - Ray raises several kinds; all mean "cannot join"
        line = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        hint = ("; a cluster started with token authentication (Ray 2.60's default) also "
                "needs RAY_AUTH_MODE=token here" if address not in (None, "auto", "local")
                and "RAY_AUTH_MODE" not in os.environ else "")
        raise UserError(f"{shown if address else 'a local Ray cluster'}: cannot start or "
                        f"join Ray ({line}){hint}") from None
    return True


def _check_reachable(address: str, shown: str) -> None:
    """Ray waits long for a head that is not there: ask the port first."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"{shown}: expected host:port (e.g. 10.0.0.1:6379) or auto")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise UserError(f"{shown}: no Ray head answers there ({e.strerror or e}); start one "
                        f"with `ray start --head` or fix the address") from None
