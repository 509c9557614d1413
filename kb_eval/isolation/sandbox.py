"""The sandbox around every child that may run candidate code (builds, runs, checks).

Entered first, while the child has one thread: namespaces (user, PID, mount with private
/tmp, /run and /dev/shm, network with no interface, IPC), hard resource limits lowered
to the soft ones, and Landlock (reads of the system, Python, torch, the toolchain and
the policy's folders; writes under its write roots; `narrow` adds a per-task layer).
`clean_env` scrubs secrets where the child or its zygote starts. Kernel primitives, not
a wrapper process per child: children fork from a zygote that imported torch
(docs/GUARANTEES.md, "The sandbox").
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import shutil
import sys
from pathlib import Path

from pydantic import BaseModel

POLICY_VAR = "KB_EVAL_SANDBOX_POLICY"  # the Policy as JSON; absent: no sandbox (--no-sandbox)
INSIDE_VAR = "KB_EVAL_SANDBOXED"  # set once a process has entered it
MASKED = ("/tmp", "/var/tmp", "/run", "/dev/shm")
SYSTEM_READ = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
               "/opt", "/proc", "/sys", "/dev")
DEVICE_WRITE = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
                "/dev/tty")
# Variables a child keeps (by name or prefix); everything else of the user's is dropped.
KEEP_NAMES = {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR", "USER",
              "LOGNAME", "SHELL", "PYTHONPATH", "PYTHONHASHSEED", "PYTHONUNBUFFERED",
              "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH",
              "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "CC", "CXX",
              "MAX_JOBS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"}
KEEP_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "NVCC_", "TORCH_", "PYTORCH_", "TRITON_",
                 "OMP_", "MKL_", "KMP_", "OPENBLAS_", "KB_EVAL_", "KB_PCH_", "KB_NVCC_")
SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH", re.IGNORECASE)
DROP_NAMES = {"KB_EVAL_CONFIG"}  # the user's config file: not the candidate's to read

CLONE_NEWNS, CLONE_NEWIPC = 0x00020000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 0x4000, 0x40000
OPEN_TREE_CLONE, AT_RECURSIVE, MOVE_MOUNT_F_EMPTY_PATH = 1, 0x8000, 4
SYS_OPEN_TREE, SYS_MOVE_MOUNT = 428, 429  # the same on x86-64 and arm64


class SandboxError(RuntimeError):
    """The sandbox could not be entered: the child must not go on without it."""


class Policy(BaseModel):
    """What a sandboxed child may touch besides the system: `write` roots (read and
    write), `read` roots (read only)."""
    write: list[str] = []
    read: list[str] = []

    def to_env(self) -> dict[str, str]:
        return {POLICY_VAR: self.model_dump_json()}


def policy_from_env(env: dict | None = None) -> Policy | None:
    text = (os.environ if env is None else env).get(POLICY_VAR)
    return Policy.model_validate_json(text) if text else None


def roots_identity(env: dict | None) -> str:
    """The folders a sandboxed child of `env` has bound (its policy's roots), by inode:
    a spare started before one of them was removed and made again sees the old one."""
    policy = policy_from_env(env or {})
    if policy is None:
        return ""
    seen = []
    for root in policy.write + policy.read:
        try:
            st = os.stat(root)
            seen.append(f"{st.st_dev}:{st.st_ino}")
        except OSError:
            seen.append("-")
    return ",".join(seen)


def clean_env(env: dict[str, str]) -> dict[str, str]:
    """What a sandboxed child inherits of `env`: toolchain, Python and CUDA settings;
    no key, token or password, nothing else of the user's."""
    def kept(name: str) -> bool:
        if name in DROP_NAMES or (SECRET.search(name) and not name.startswith("KB_EVAL_")):
            return False
        return name in KEEP_NAMES or name.startswith(KEEP_PREFIXES)
    return {k: v for k, v in env.items() if kept(k)}


# ------------------------------------------------------------------ libc
def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise SandboxError(f"{what}: {os.strerror(err)} (errno {err})")
    return result


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    _check(_libc().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags),
                         enc(data)), f"mount {target}")


# ------------------------------------------------------------------ entering
def detach() -> None:
    """In the process that forks the sandboxed child: new user, mount, PID, network and
    IPC namespaces (the next child forked is process 1 of the new PID namespace), with
    this process's own ids mapped into the user namespace."""
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc().unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET
                           | CLONE_NEWIPC), "unshare")
    for name, text in (("setgroups", "deny"), ("gid_map", f"{gid} {gid} 1"),
                       ("uid_map", f"{uid} {uid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def enter(policy: Policy) -> None:
    """In the sandboxed child (process 1 of its PID namespace, one thread): the fresh
    /proc and masked folders; `become_init` then forks the child proper, which restricts
    itself (no capabilities, locked limits, Landlock's first layer)."""
    global _LEADER
    from kb_eval.faults import inject_fault

    inject_fault("sandbox_start", SandboxError)  # the fault suite: a host without it
    _LEADER = _LEADER or _outer_pid()
    for root in policy.write:  # a lane on another node: this node's scratch may be new
        try:
            os.makedirs(root, exist_ok=True)
        except OSError:
            pass
    reads, writes = _existing(read_roots(policy)), _existing(policy.write)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mask(reads + writes)
    writes.append(_private_tmp())
    _LAYER_ONE[:] = [reads, writes + _device_files()]
    os.environ[INSIDE_VAR] = "1"


_LAYER_ONE: list[list[str]] = []  # what `enter` found, for the child proper's Landlock


def restrict() -> None:
    """In the child proper, before anything else: no capabilities, locked limits and
    Landlock's first layer (its own /proc entries writable: the CUDA driver writes there)."""
    _drop_capabilities()
    _lock_limits()
    reads, writes = _LAYER_ONE
    _landlock(reads, writes + ["/proc/self"])


# Process 1 of a sandbox reaps and ends as the child proper did: a signal N is told as
# exit status SIGNALLED + N (outcome.py). Not dumpable: nothing inside may trace it.
SIGNALLED = 200
_INIT = """
import ctypes, os, sys
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
child = int(sys.argv[1])
os.closerange(0, 2)
os.closerange(3, os.sysconf('SC_OPEN_MAX'))
while True:
    try:
        pid, status = os.wait()
    except ChildProcessError:
        os._exit(70)
    if pid == child:
        break
os._exit(200 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.waitstatus_to_exitcode(status))
"""


def become_init() -> None:
    """In process 1, after `enter`: fork the child proper (which returns from here) and
    become the namespace's init, which ignores signals sent from inside: the child proper
    must not, so a candidate's own abort or kill ends it as anywhere else."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        restrict()
        return
    try:
        os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", _INIT, str(pid)])
    finally:
        os._exit(71)


def _drop_capabilities() -> None:
    """No capability left in the user namespace, now or after an exec: nothing to mount,
    trace or reconfigure with (Landlock and the namespaces hold regardless)."""
    libc = _libc()
    for cap in range(64):
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP, until past the last cap
            break
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    _check(libc.capset(header, data), "capset")


def _private_tmp() -> str:
    """A temporary folder of this child's own (on its private /tmp): imports between
    entering and the task's folder (torch's) ask for one."""
    import tempfile

    private = "/tmp/kb_eval_child" if os.path.isdir("/tmp") else "/dev/shm/kb_eval_child"
    os.makedirs(private, exist_ok=True)
    os.environ["TMPDIR"] = private
    tempfile.tempdir = None
    return private


def narrow(writable: list[str], readable: list[str]) -> None:
    """Landlock's second layer, at a task: writes only under `writable`, reads only of
    the system and `readable` (and `writable`)."""
    reads = _existing([*_system_reads(), *readable, *writable])
    _landlock(reads, _existing(writable) + _device_files() + ["/proc/self"])


_LEADER: int | None = None


def leader_pid() -> int:
    """This process's group leader as the evaluator sees it (its pid outside the PID
    namespace): whom the evaluator stops and kills. Unsandboxed: this process."""
    return _LEADER or os.getpid()


def set_leader(pid: int) -> None:
    """The process that leads this child's group is another one (the slow start's
    waiting parent, which the evaluator started)."""
    global _LEADER
    _LEADER = pid


def _outer_pid() -> int:
    """Our pid in the PID namespace /proc was mounted for (read before /proc is mounted
    again for ours: its first NSpid field)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[1])
    raise SandboxError("no NSpid in /proc/self/status")


def read_roots(policy: Policy) -> list[str]:
    """What a sandboxed child may read: the system, Python and its packages (not a
    project folder on the path: only our own package in it), the toolchain, the policy."""
    return sorted({*_system_reads(), *policy.read, *policy.write})


@functools.lru_cache(maxsize=1)
def _system_reads() -> tuple[str, ...]:
    """read_roots' part that is the same for every child (found once, in the zygote)."""
    import kb_eval

    ours = Path(kb_eval.__file__).resolve().parent
    python = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    entries = [p for p in sys.path + os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for entry in entries:
        path = Path(entry).resolve()
        if path.is_dir() and not (path / "kb_eval").is_dir() and path != Path.cwd():
            python.add(str(path))
    tools = {str(Path(found).resolve().parent.parent) for name in
             ("c++", "g++", "gcc", "cc", "nvcc", "ninja", "ld")
             if (found := shutil.which(name))}
    cuda = {os.environ[v] for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)}
    return tuple(sorted({*SYSTEM_READ, *python, *tools, *cuda, str(ours)}))


def _existing(paths) -> list[str]:
    return [p for p in dict.fromkeys(paths) if os.path.exists(p)]


def _device_files() -> list[str]:
    gpus = [str(p) for p in Path("/dev").glob("nvidia*")]
    return _existing([*DEVICE_WRITE, *gpus, "/dev/dri"])


def _mask(keep: list[str]) -> None:
    """An empty private tmpfs over each of MASKED (sockets of other programs live there:
    a unix socket is not a network connect), with the roots in `keep` under them bound
    back where they were."""
    libc = _libc()
    masked = [m for m in MASKED if os.path.isdir(m) and not os.path.islink(m)]
    under = {}
    for root in keep:
        real = os.path.realpath(root)
        if any(real == m or real.startswith(m + "/") for m in masked):
            under[real] = _check(libc.syscall(SYS_OPEN_TREE, -100, real.encode(),
                                              OPEN_TREE_CLONE | AT_RECURSIVE | os.O_CLOEXEC),
                                 f"open_tree {real}")
    for m in masked:
        _mount("tmpfs", m, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m")
    for real, fd in under.items():
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(real, exist_ok=True)
        else:
            _touch(real)
        _check(libc.syscall(SYS_MOVE_MOUNT, fd, b"", -100, real.encode(),
                            MOVE_MOUNT_F_EMPTY_PATH), f"move_mount {real}")
        os.close(fd)


def _touch(path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "a").close()


def _lock_limits() -> None:
    """Every hard limit down to its soft one (files: both raised first to a build's
    needs): an unprivileged process can lower a hard limit, never raise it again."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 16
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(want, 1 << 16)),) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for name in dir(resource):
        if name.startswith("RLIMIT_") and name not in ("RLIMIT_NOFILE", "RLIMIT_CORE"):
            which = getattr(resource, name)
            try:
                soft, _ = resource.getrlimit(which)
                resource.setrlimit(which, (soft, soft))
            except (ValueError, OSError):
                pass


def preload() -> None:
    """Import Landlock's bindings here (the zygote), not in each child after its fork:
    ~15 ms a child on a 2-core machine. A missing package is reported on entering."""
    try:
        import landlock.plumbing  # noqa: F401
    except ImportError:
        pass


def _landlock(reads: list[str], writes: list[str]) -> None:
    """One Landlock layer: `reads` readable (and executable), `writes` fully usable;
    device ioctls are not handled (a GPU's driver needs them)."""
    try:
        from landlock import FSAccess, Ruleset
        from landlock.plumbing import landlock_abi_version
    except ImportError as e:
        raise SandboxError(f"the landlock package is missing ({e})") from e
    try:
        ctypes.set_errno(0)  # the package takes a left-over errno for its call's failure
        abi = landlock_abi_version()
        handled = FSAccess.all() & ~_ioctl(FSAccess, abi)
        ruleset = Ruleset(restrict_rules=handled)
        read = FSAccess.READ_FILE | FSAccess.READ_DIR | FSAccess.EXECUTE
        for path in reads:
            ruleset.allow(path, rules=read if os.path.isdir(path) else _file(read))
        for path in writes:
            ruleset.allow(path, rules=handled if os.path.isdir(path) else
                          _file(handled))
        ruleset.apply()
    except OSError as e:
        raise SandboxError(f"Landlock: {e}") from e


def _ioctl(access, abi: int) -> int:
    return access.IOCTL_DEV if abi >= 5 else 0


def _file(rights):
    """The rights of `rights` that a rule on a single file may carry."""
    from landlock import FSAccess

    return rights & FSAccess.all_file()
