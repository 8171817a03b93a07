"""pinwise from Python: run a program with smart pinning, trace one with eBPF, and read
the histories both write as plain Python objects.

The wheel ships the ``pinwise`` command (installed beside the interpreter's other scripts)
and the preload library ``pinwise run`` injects (installed as
``<prefix>/lib/pinwise/libpinwise_preload.so``, where the command looks for it). This module
drives that command; it never loads pinwise into the Python process itself.

    >>> import pinwise
    >>> result = pinwise.run(["python3", "train.py"], budget="8G", output="run.bin")
    >>> result.returncode, result.summary["totals"]["transfers_htod"]
    >>> history = pinwise.load_history("run.bin")
    >>> [a.size for a in history.allocations if a.kind == "PINNED_ALLOC"]

    >>> with pinwise.trace(os.getpid(), output="me.json") as t:   # root (or CAP_BPF)
    ...     do_cuda_work()
    >>> t.history().allocations

Errors: a history that is not one raises :class:`HistoryError` (a ``ValueError``) naming the
problem; a ``pinwise`` command that fails raises :class:`PinwiseError` with its message.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
from dataclasses import dataclass, field, fields
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

__all__ = [
    "Allocation",
    "History",
    "HistoryError",
    "PinwiseError",
    "RunResult",
    "Trace",
    "binary",
    "load_history",
    "run",
    "trace",
]

#: The ``format`` field of a JSON history.
HISTORY_FORMAT = "pinwise-history"
#: The newest JSON history version this module reads (older ones read too).
HISTORY_VERSION = 3
#: The first bytes of a binary history.
BINARY_MAGIC = b"\x89PWH\r\n\x1a\n"
#: Directions, in the order of the history's per-direction arrays.
DIRECTIONS = ("HtoD", "DtoH", "DtoD", "HtoH")
#: Values of ``run(mode=...)``.
MODES = ("adaptive", "profile", "use")

PathLike = Union[str, "os.PathLike[str]"]


class PinwiseError(RuntimeError):
    """The ``pinwise`` command failed; the message is its own (from stderr)."""


class HistoryError(ValueError):
    """A file is not a history this version of pinwise reads."""


def binary() -> str:
    """The path of the ``pinwise`` command this package installed.

    Looked for, in order: ``$PINWISE_BIN``; the file this distribution installed (its
    RECORD); the interpreter's scripts directory and the user one; then ``PATH``. Raises
    :class:`PinwiseError` when none is there.
    """
    explicit = os.environ.get("PINWISE_BIN")
    if explicit:
        return explicit
    candidates: List[str] = []
    try:
        from importlib import metadata

        for f in metadata.files("pinwise") or []:
            if f.name == "pinwise" and f.parent.name in ("bin", "scripts"):
                candidates.append(os.path.normpath(str(f.locate())))
    except Exception:  # not installed as a distribution (a source checkout)
        pass
    schemes = [None]
    if sys.version_info >= (3, 10):
        schemes.append(sysconfig.get_preferred_scheme("user"))
    else:
        schemes.append("posix_user")
    for scheme in schemes:
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        candidates.append(os.path.join(scripts, "pinwise"))
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    found = shutil.which("pinwise")
    if found:
        return found
    raise PinwiseError(
        "the pinwise command was not found (looked in: %s, and PATH): reinstall the package, "
        "or set PINWISE_BIN" % ", ".join(candidates)
    )


def _command(cmd: Union[str, Sequence[PathLike]]) -> List[str]:
    if isinstance(cmd, (str, bytes)) or not isinstance(cmd, Iterable):
        raise TypeError("cmd must be a list of arguments, e.g. ['python3', 'train.py'], not %r" % (cmd,))
    out = [os.fspath(c) for c in cmd]
    if not out:
        raise ValueError("cmd is empty: give the program to run and its arguments")
    return out


def _size(value: Union[int, str]) -> str:
    if isinstance(value, bool):
        raise TypeError("a size is bytes (int) or a string such as '8G', not a bool")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a size cannot be negative: %d" % value)
        return str(value)
    return str(value)


def _read_json(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


@dataclass
class RunResult:
    """What :func:`run` gives back.

    Attributes:
        returncode: the program's exit status (negative: killed by that signal), as
            ``pinwise run`` passes it through; 125 with ``strict=True`` when pinwise itself
            failed.
        command: the ``pinwise`` command line that ran.
        output: the history file asked for (``None`` without ``output=``).
        profile: the profile file given (``None``: profile and use modes then use
            ``<command>.pinwise-profile.json`` in the working directory).
        summary: the run summary (``schemas/run-summary.schema.json``: per process and
            totals) as a dict, or ``None`` when pinwise could not write it.
        stdout, stderr: the program's and pinwise's output when ``capture_output=True``.
    """

    returncode: int
    command: List[str]
    output: Optional[str]
    profile: Optional[str]
    summary: Optional[Dict[str, Any]]
    stdout: Optional[str] = None
    stderr: Optional[str] = None

    def history(self) -> "History":
        """The history this run wrote (see :func:`load_history`)."""
        if self.output is None:
            raise PinwiseError("this run wrote no history: pass output=PATH to pinwise.run")
        return load_history(self.output)


def run(
    cmd: Sequence[PathLike],
    *,
    mode: str = "adaptive",
    budget: Union[int, str, None] = None,
    output: Optional[PathLike] = None,
    profile: Optional[PathLike] = None,
    force: bool = False,
    strict: bool = False,
    args: Sequence[str] = (),
    env: Optional[Dict[str, str]] = None,
    cwd: Optional[PathLike] = None,
    capture_output: bool = False,
    timeout: Optional[float] = None,
) -> RunResult:
    """Runs ``cmd`` under ``pinwise run`` (the preload library: smart pinning and in-process
    tracing) and waits for it.

    Args:
        cmd: the program and its arguments, e.g. ``["python3", "train.py"]``.
        mode: ``"adaptive"`` (learn within the run), ``"profile"`` (also write a profile) or
            ``"use"`` (follow a profile).
        budget: most bytes kept pinned: an int, or ``"8G"``, ``"512MiB"``, ``"25%"`` of RAM
            (default: a quarter of RAM, and no more than the program's own peak where it pins
            memory itself; a budget given lets pinwise pin up to it).
        output: write the history here (``.json``: JSON, else the compact binary format).
        profile: the profile to write (profile mode) or follow (use mode).
        force: replace output files that exist already (else pinwise refuses before
            starting the program).
        strict: return 125 if pinwise itself failed (an output not written).
        args: further ``pinwise run`` options, e.g. ``["--fingerprint", "sampled"]``.
        env: the program's environment (default: this process's).
        cwd: the program's working directory.
        capture_output: keep stdout and stderr in the result instead of passing them on.
        timeout: seconds before the run is killed (``subprocess.TimeoutExpired``).

    The program's exit status is in :attr:`RunResult.returncode`. When pinwise fails before
    starting the program (a bad argument, an output that exists already without ``force``,
    no preload library), :class:`PinwiseError` is raised with its message.
    """
    if mode not in MODES:
        raise ValueError("mode must be one of %s, not %r" % (", ".join(MODES), mode))
    program = _command(cmd)
    line = [binary(), "run", "--mode", mode]
    if budget is not None:
        line += ["--budget", _size(budget)]
    if output is not None:
        output = os.fspath(output)
        line += ["--output", output]
    if profile is not None:
        profile = os.fspath(profile)
        line += ["--profile", profile]
    if force:
        line.append("--force")
    if strict:
        line.append("--strict")
    line += list(args)
    with tempfile.TemporaryDirectory(prefix="pinwise-run-") as scratch:
        summary_path = os.path.join(scratch, "summary.json")
        line += ["--stats-json", summary_path, "--"] + program
        proc = subprocess.run(
            line,
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE if capture_output else None,
            stderr=subprocess.PIPE if capture_output else None,
            text=True,
            timeout=timeout,
        )
        summary = _read_json(summary_path)
    if summary is None and proc.returncode in (1, 2):
        # pinwise failed before the program started (a bad argument, an output that exists
        # already, no preload library): its message is on stderr (or in proc.stderr).
        raise PinwiseError(
            _last_error(proc.stderr)
            if capture_output
            else "pinwise run failed (exit status %d): its message is above" % proc.returncode
        )
    return RunResult(
        returncode=proc.returncode,
        command=line,
        output=output,
        profile=profile,
        summary=summary,
        stdout=proc.stdout if capture_output else None,
        stderr=proc.stderr if capture_output else None,
    )


def _last_error(stderr: Optional[str]) -> Optional[str]:
    """pinwise's last error message in ``stderr`` (without its ``pinwise: error:`` prefix)."""
    lines = [l for l in (stderr or "").splitlines() if l.strip()]
    errors = [l for l in lines if "error" in l]
    last = (errors or lines or [None])[-1]
    if last is not None and last.startswith("pinwise: error: "):
        last = last[len("pinwise: error: ") :]
    return last


class Trace:
    """A running ``pinwise trace``: made by :func:`trace`, used as a context manager.

    Entering starts the tracer and returns once it is attached (its probes placed); the
    block then runs while it traces. Leaving a trace of a PID stops the tracer (as Ctrl-C
    does: what was seen is written); leaving a trace of a command waits for the command to
    end (``stop()`` ends it early). After that, :attr:`returncode`, :attr:`summary` and
    :meth:`history` tell what was recorded.

    Attributes:
        output: the history file.
        returncode: ``pinwise trace``'s exit status (a launched command's own status).
        summary: the trace summary (``schemas/trace-summary.schema.json``) as a dict.
        stderr: what ``pinwise trace`` said, once it ended.
    """

    def __init__(
        self,
        target: Union[int, Sequence[PathLike]],
        *,
        output: PathLike,
        force: bool = False,
        duration: Optional[str] = None,
        args: Sequence[str] = (),
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[PathLike] = None,
        ready_timeout: float = 120.0,
        echo: bool = False,
    ) -> None:
        self.output = os.fspath(output)
        self.returncode: Optional[int] = None
        self.summary: Optional[Dict[str, Any]] = None
        self.stderr: Optional[str] = None
        self._is_pid = isinstance(target, int) and not isinstance(target, bool)
        self._scratch = tempfile.TemporaryDirectory(prefix="pinwise-trace-")
        self._summary_path = os.path.join(self._scratch.name, "summary.json")
        line = [binary(), "trace", "--output", self.output, "--summary-json", self._summary_path]
        if force:
            line.append("--force")
        if duration is not None:
            line += ["--duration", str(duration)]
        line += list(args)
        if self._is_pid:
            if target <= 0:
                raise ValueError("a PID is positive, not %d" % target)
            line += ["--pid", str(target)]
        else:
            line += ["--"] + _command(target)  # type: ignore[arg-type]
        self.command = line
        self._env = env
        self._cwd = cwd
        self._ready_timeout = ready_timeout
        self._echo = echo
        self._proc: Optional[subprocess.Popen] = None
        self._lines: List[str] = []
        self._ready = threading.Event()
        self._attached = False
        self._reader: Optional[threading.Thread] = None

    def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        for raw in self._proc.stderr:
            self._lines.append(raw)
            if self._echo:
                sys.stderr.write(raw)
            # `pinwise trace: tracing PID 42: ...` once the probes are placed.
            if raw.startswith("pinwise trace: tracing "):
                self._attached = True
                self._ready.set()
        self._ready.set()

    def start(self) -> "Trace":
        """Starts the tracer and waits until it is attached. Raises :class:`PinwiseError`
        if it ends first (its message says why, e.g. no root) or is not attached within
        ``ready_timeout`` seconds."""
        if self._proc is not None:
            raise PinwiseError("this trace was started already")
        self._proc = subprocess.Popen(
            self.command,
            env=self._env,
            cwd=self._cwd,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        if not self._ready.wait(self._ready_timeout):
            self._interrupt()
            self._finish()
            raise PinwiseError("pinwise trace was not attached after %.0f s" % self._ready_timeout)
        if not self._attached:
            # Its stderr ended before it said it was tracing: it failed to start.
            self._finish()
            raise PinwiseError(
                "pinwise trace ended before tracing (status %s): %s"
                % (self.returncode, _last_error(self.stderr) or "no message")
            )
        return self

    def _interrupt(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)

    def stop(self, timeout: Optional[float] = 60.0) -> int:
        """Ends the trace now (as Ctrl-C: the history is written; a launched command gets
        the signal too) and waits for the tracer. Returns its exit status."""
        self._interrupt()
        return self._finish(timeout)

    def wait(self, timeout: Optional[float] = None) -> int:
        """Waits for the tracer to end by itself (its command exited, its PID exited, or
        its duration passed). Returns its exit status."""
        return self._finish(timeout)

    def _finish(self, timeout: Optional[float] = None) -> int:
        assert self._proc is not None
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._reader is not None:
            self._reader.join()
        if self._proc.stderr is not None:
            self._proc.stderr.close()
        self.returncode = self._proc.returncode
        self.stderr = "".join(self._lines)
        self.summary = _read_json(self._summary_path)
        self._scratch.cleanup()
        return self.returncode

    def history(self) -> "History":
        """The history the trace wrote (see :func:`load_history`); after the trace ended."""
        if self.returncode is None:
            raise PinwiseError("the trace is still running: leave the with block (or stop()) first")
        return load_history(self.output)

    def __enter__(self) -> "Trace":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.returncode is not None:
            return
        if self._is_pid or exc_type is not None:
            self.stop()
        else:
            self.wait()


def trace(
    target: Union[int, Sequence[PathLike]],
    *,
    output: PathLike,
    force: bool = False,
    duration: Optional[str] = None,
    args: Sequence[str] = (),
    env: Optional[Dict[str, str]] = None,
    cwd: Optional[PathLike] = None,
    ready_timeout: float = 120.0,
    echo: bool = False,
) -> Trace:
    """Traces a running process (``target`` an int PID, ``os.getpid()`` included) or a
    command it launches (``target`` a list of arguments) with ``pinwise trace`` (eBPF:
    needs root, or CAP_BPF and CAP_PERFMON), as a context manager::

        with pinwise.trace(os.getpid(), output="me.bin") as t:
            do_cuda_work()
        print(t.summary["totals"], len(t.history().allocations))

    Args:
        target: a PID, or the command and its arguments.
        output: the history file (``.json``: JSON, else binary).
        force: replace an output that exists already.
        duration: stop after this long (``"30s"``, ``"2m"``).
        args: further ``pinwise trace`` options, e.g. ``["--malloc", "--libcuda", path]``.
        env, cwd: the tracer's (and a launched command's) environment and directory.
        ready_timeout: seconds to wait for the tracer to attach.
        echo: pass the tracer's messages on to this process's stderr as they come.
    """
    return Trace(
        target,
        output=output,
        force=force,
        duration=duration,
        args=args,
        env=env,
        cwd=cwd,
        ready_timeout=ready_timeout,
        echo=echo,
    )


def _split(cls, data: Dict[str, Any]) -> Dict[str, Any]:
    names = {f.name for f in fields(cls)}
    known = {k: v for k, v in data.items() if k in names}
    known["extra"] = {k: v for k, v in data.items() if k not in names}
    return known


@dataclass
class Allocation:
    """One host allocation's life (``schemas/history.schema.json``, ``$defs/allocation``).

    Attributes:
        id, pid, process: its number, its process's PID, and the index into
            :attr:`History.processes` (which tells reused PIDs apart).
        start, size: host address and bytes.
        kind: ``"PAGEABLE"``, ``"PINNED_ALLOC"``, ``"REGISTERED"`` or ``"UNTRACKED"``.
        tag: where it was made: ``{"module", "offset", "call_no"}``.
        final_state: ``"LIVE"``, ``"FREED"``, ``"REPLACED"``, ``"UNMAPPED"`` or ``"EXITED"``.
        alloc_ts_ns, end_ts_ns: when it was made and ended (``None``: still live).
        transfer_count, bytes_transferred: its copies to or from a device.
        counters: per direction (``"HtoD"``...), pageable and pinned transfers and bytes.
        stack: index into :attr:`History.stacks`, or ``None``.
        events: its events, as dicts (``type``, ``timestamp_ns``, ...).
        extra: fields this module does not know (from a newer pinwise).
    """

    id: int
    pid: int
    process: int
    start: int
    size: int
    kind: str
    tag: Dict[str, Any]
    final_state: str
    alloc_ts_ns: int
    end_ts_ns: Optional[int]
    transfer_count: int
    bytes_transferred: int
    counters: Dict[str, Dict[str, int]]
    pinned_by_registration: bool = False
    events_dropped: int = 0
    stack: Optional[int] = None
    redundant: Optional[Dict[str, Any]] = None
    events: List[Dict[str, Any]] = field(default_factory=list)
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def pinned(self) -> bool:
        """Whether it was pinned memory (allocated pinned, or registered)."""
        return self.kind in ("PINNED_ALLOC", "REGISTERED") or self.pinned_by_registration

    def transfers(self, direction: str) -> int:
        """Its copies in ``direction`` (``"HtoD"``, ``"DtoH"``, ...), pageable and pinned."""
        c = self.counters.get(direction, {})
        return c.get("pageable_transfers", 0) + c.get("pinned_transfers", 0)


@dataclass
class History:
    """A history (``schemas/history.schema.json``), as :func:`load_history` reads it.

    Attributes:
        format, version: ``"pinwise-history"`` and the JSON version.
        config, stats, source_stats, fingerprints: dicts as in the file.
        modules: ``[{"key", "path", "build_id"}]``; tags and frames name modules by key.
        processes: ``[{"pid", "first_ts_ns", "last_ts_ns", "exit_ts_ns"}]``.
        allocations: :class:`Allocation` objects.
        stacks: ``[{"frames": [...]}]``, innermost frame first.
        symbols: ``[{"module", "offset", "function", "file", "line"}]``.
        path: the file it was read from.
        extra: fields this module does not know (from a newer pinwise).
    """

    format: str
    version: int
    config: Dict[str, Any]
    modules: List[Dict[str, Any]]
    processes: List[Dict[str, Any]]
    stats: Dict[str, Any]
    source_stats: Dict[str, Any]
    allocations: List[Allocation]
    stacks: List[Dict[str, Any]] = field(default_factory=list)
    symbols: List[Dict[str, Any]] = field(default_factory=list)
    fingerprints: Optional[Dict[str, Any]] = None
    path: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    def transfers(self) -> Dict[str, Dict[str, int]]:
        """Copies and bytes per direction: ``{"HtoD": {"transfers": n, "bytes": b}, ...}``."""
        return dict(zip(DIRECTIONS, self.stats.get("transfers", [])))

    def stack(self, allocation: Allocation) -> Optional[List[Dict[str, Any]]]:
        """The frames of ``allocation``'s call stack (innermost first), or ``None``."""
        if allocation.stack is None or allocation.stack >= len(self.stacks):
            return None
        return self.stacks[allocation.stack]["frames"]

    @classmethod
    def from_dict(cls, data: Dict[str, Any], path: Optional[str] = None) -> "History":
        """A :class:`History` from a parsed JSON history (checks its format and version)."""
        where = path or "the history"
        if not isinstance(data, dict):
            raise HistoryError("%s: a JSON history is an object, not %s" % (where, type(data).__name__))
        if data.get("format") != HISTORY_FORMAT:
            raise HistoryError(
                "%s: not a pinwise history (its format is %r, not %r)"
                % (where, data.get("format"), HISTORY_FORMAT)
            )
        version = data.get("version")
        if not isinstance(version, int) or not 1 <= version <= HISTORY_VERSION:
            raise HistoryError(
                "%s: history version %r is not one this package reads (1 to %d): upgrade pinwise"
                % (where, version, HISTORY_VERSION)
            )
        try:
            body = _split(cls, data)
            body["allocations"] = [Allocation(**_split(Allocation, a)) for a in data["allocations"]]
            body["path"] = path
            body.setdefault("source_stats", {})
            return cls(**body)
        except (KeyError, TypeError) as e:
            raise HistoryError("%s: a field is missing or misshapen: %s" % (where, e)) from None


def load_history(path: PathLike) -> History:
    """Reads a history written by ``pinwise trace`` or ``pinwise run``, JSON or binary, as a
    :class:`History` of plain Python values.

    A JSON history is parsed here; a binary one is converted by the ``pinwise`` command
    (``pinwise convert FILE -o - --format json``), which also keeps every whole frame of a
    file cut short. Raises :class:`HistoryError` for a file that is not a history,
    ``FileNotFoundError`` for a missing one.
    """
    # Absolute, so that a file named `-` or `-x` reaches `pinwise convert` as a file, not as
    # standard input or an option.
    path = os.path.abspath(os.fspath(path))
    with open(path, "rb") as f:
        head = f.read(len(BINARY_MAGIC))
        if head != BINARY_MAGIC[: len(head)] or not head:
            rest = f.read()
            text = (head + rest).decode("utf-8", errors="replace")
            if not text.lstrip().startswith("{"):
                raise HistoryError(
                    "%s: neither a pinwise binary history nor a JSON object" % path
                    if text.strip()
                    else "%s: the file is empty" % path
                )
            try:
                data = json.loads(text)
            except ValueError as e:
                raise HistoryError("%s: not valid JSON: %s" % (path, e)) from None
            return History.from_dict(data, path)
    proc = subprocess.run(
        [binary(), "convert", path, "--output", "-", "--format", "json", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if proc.returncode != 0:
        raise HistoryError(_last_error(proc.stderr) or "pinwise convert failed on %s" % path)
    return History.from_dict(json.loads(proc.stdout), path)


def main() -> int:
    """``python -m pinwise ARGS``: the ``pinwise`` command with these arguments."""
    line = [binary()] + sys.argv[1:]
    os.execv(line[0], line)
    return 127  # not reached
