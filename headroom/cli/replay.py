"""A command on unchanged inputs prints what it printed before (docs/trace-core.md, "Cache").

`classify`, `report`, `targets` and `project` of trace files write their whole output to stdout and
stderr and nothing else. The first run of one is recorded: what it wrote to each stream, in order, and
the identity of every file it read (each file named on its command line, each trace it loaded: size,
modification and change times, inode and a hash of sampled blocks, as the trace cache names a trace).
A later run with the same command line, working directory, environment, terminals, Python and
headroom files (each one's size and modification time) whose files all still have their identities
writes the recording again and exits: byte for byte what the command would print, without importing
typer, numpy, pandas or polars (docs/benchmarks.md: 0.3 s against 0.5-0.6 s for the cached analysis).

Not recorded: a command that failed, wrote a file (`report --html`), read a directory (ranks), ran on
a cluster (`--engine`, `--address`), was asked for no cache (`--no-cache`, HEADROOM_CACHE_DIR=off) or no
replay (HEADROOM_REPLAY=off),
started the loader's worker process (its own stderr is not seen here), or whose streams were replaced
while it ran. The recordings live in the trace cache's folder, under `commands/`, the newest
`KEEP` of them.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from headroom.trace.cache_key import cache_dir, sampled_hash

COMMANDS = frozenset({"classify", "report", "targets", "project"})
# Options that make a command's effect more than its output, or its inputs more than files named here.
_NOT_RECORDED = ("--html", "--no-cache", "--engine", "--address", "--help", "-h", "--version")
FORMAT = 1
KEEP = 256

_recorder: Recorder | None = None


def identity(path: str) -> list | None:
    """A file's identity as the trace cache tells it (None: not a readable file)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    sampled = sampled_hash(Path(path), st.st_size)
    return None if sampled is None else [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, sampled]


def _code_stamp() -> list:
    """headroom's files (name, size, modification time), Python and its packages' folders."""
    here = Path(__file__).resolve().parents[1]
    files = []
    for folder, dirs, names in os.walk(here):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for n in sorted(names):
            st = os.stat(os.path.join(folder, n))
            files.append((os.path.join(folder, n), st.st_size, st.st_mtime_ns))
    packages = [(p, os.stat(p).st_mtime_ns) for p in sys.path if p.endswith("-packages") and os.path.isdir(p)]
    return [sys.version, sys.executable, files, packages]


def _terminals() -> list:
    out = []
    for stream in (sys.stdout, sys.stderr):
        try:
            tty = stream.isatty()
            out.append([tty, tuple(os.get_terminal_size(stream.fileno())) if tty else None])
        except (AttributeError, OSError, ValueError):
            out.append([None, None])
    return out


def _eligible(argv: list[str]) -> bool:
    if not argv or argv[0] not in COMMANDS or os.environ.get("HEADROOM_REPLAY", "").lower() in ("0", "off"):
        return False
    return not any(w == o or w.startswith(o + "=") for w in argv[1:] for o in _NOT_RECORDED)


def _name(root: Path, argv: list[str]) -> Path:
    what = [FORMAT, argv, os.getcwd(), sorted(os.environ.items()), _terminals(), _code_stamp()]
    digest = hashlib.blake2b(json.dumps(what).encode(), digest_size=16).hexdigest()
    return root / "commands" / f"{digest}.json"


def replay(argv: list[str]) -> bool:
    """Write the recorded output of this command, if it has one that still holds; whether it did."""
    root = cache_dir() if _eligible(argv) else None
    if root is None:
        return False
    try:
        record = json.loads(_name(root, argv).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        return False
    if any(identity(path) != known for path, known in record["files"]):
        return False
    streams = {"out": sys.stdout, "err": sys.stderr}
    for which, text in record["writes"]:
        streams[which].write(text)
        streams[which].flush()
    return True


class _Tee:
    """A stream that also keeps what is written to it, in order with its sibling's writes."""

    def __init__(self, stream: Any, which: str, writes: list) -> None:
        self.stream, self._which, self._writes = stream, which, writes

    def write(self, text: str) -> int:
        if self._writes and self._writes[-1][0] == self._which:
            self._writes[-1][1] += text
        else:
            self._writes.append([self._which, text])
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


class Recorder:
    """Keeps a command's output and files while it runs; `finish` stores them when the command succeeded."""

    def __init__(self, target: Path, argv: list[str]) -> None:
        self.target = target
        self.files: dict[str, list | None] = {}
        self.writes: list[list[str]] = []
        self.refused = False
        for word in argv[1:]:
            for name in [word] + ([word.split("=", 1)[1]] if word.startswith("-") and "=" in word else []):
                if os.path.isdir(name):
                    self.refused = True
                elif os.path.isfile(name):
                    self.read(name)
        self.out, self.err = _Tee(sys.stdout, "out", self.writes), _Tee(sys.stderr, "err", self.writes)
        sys.stdout, sys.stderr = self.out, self.err

    def read(self, path: str | os.PathLike) -> None:
        """The command reads this file: its identity, taken before it is read."""
        name = os.path.abspath(path)
        if name not in self.files:
            self.files[name] = identity(name)
            self.refused |= self.files[name] is None

    def finish(self, code: Any) -> None:
        global _recorder
        _recorder = None
        replaced = sys.stdout is not self.out or sys.stderr is not self.err
        if not replaced:
            sys.stdout, sys.stderr = self.out.stream, self.err.stream
        if (
            self.refused
            or replaced
            or code not in (0, None)
            or "headroom.trace.worker" in sys.modules
            and sys.modules["headroom.trace.worker"].Worker.started
        ):
            return
        from headroom.errors import UserError
        from headroom.jsonio import write_json

        record = {"format": FORMAT, "files": sorted(self.files.items()), "writes": self.writes}
        try:
            write_json(self.target, record, indent=None)
            _prune(self.target.parent)
        except (UserError, OSError):
            pass


def _prune(folder: Path) -> None:
    records = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    for old in records[:-KEEP]:
        old.unlink(missing_ok=True)


def start(argv: list[str]) -> Recorder | None:
    """Record this command if it can be replayed later."""
    global _recorder
    root = cache_dir() if _eligible(argv) else None
    _recorder = None if root is None else Recorder(_name(root, argv), argv)
    return _recorder


def reads(path: str | os.PathLike) -> None:
    """The running command reads this file (a trace found in a directory, a capture trace)."""
    if _recorder is not None:
        _recorder.read(path)


def refuse() -> None:
    """The running command's output depends on more than its files (a directory's list of files)."""
    if _recorder is not None:
        _recorder.refused = True


def recording() -> bool:
    return _recorder is not None


def terminal(stream: Any) -> Any:
    """The stream under a recording (a spinner's frames are not output)."""
    return stream.stream if isinstance(stream, _Tee) else stream
