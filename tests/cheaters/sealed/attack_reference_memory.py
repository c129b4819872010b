"""Attack: once the reference child exists (at the first timed phase), writes zeros over its weight
and bias through /proc/<pid>/mem (found by searching its memory for the candidate's own weights,
which are the reference's: same seed), then returns zeros - which now match the reference's
timed outputs - at a fraction of the cost. Honest through the correctness trials (the reference
child does not exist yet). Reports to HEADROOM_TEST_REPORT whether the reference's memory was out of
reach, searched without a hit, or zeroed.

On CUDA the weights it looks for are copied to the host first (``.cpu()``), and the whole tensor's bytes
must match: /proc/<pid>/mem reaches the reference's host memory only, and the reference builds its
model on the device, so the search finds nothing there (device allocations are not in its readable
mappings) and the candidate stays honest. Writing the reference's device memory takes the reference's
cooperation (a CUDA IPC handle it exported) or control of the process (ptrace as its uid)."""

import os

import torch
import torch.nn as nn


def _ppid(pid) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _reference_pids() -> list[int]:
    """Siblings (children of the fork server) whose stdout is the reference's log, or unreadable."""
    out, parent = [], os.getppid()
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                if _ppid(d) != parent:
                    continue
                if os.readlink(f"/proc/{d}/fd/1").endswith(".reference.log"):
                    out.append(int(d))
            except PermissionError:
                out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def _report(text: str) -> None:
    path = os.environ.get("HEADROOM_TEST_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(text + "\n")


def _zero_in(pid: int, patterns: list[bytes], sizes: list[int]) -> int:
    hits = 0
    fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)  # PermissionError when out of reach
    try:
        with open(f"/proc/{pid}/maps") as f:
            maps = [ln.split() for ln in f]
        for m in maps:
            if len(m) < 2 or "rw" not in m[1] or (len(m) > 5 and m[5].startswith("/")):
                continue
            lo, hi = (int(x, 16) for x in m[0].split("-"))
            if hi - lo > (256 << 20):
                continue
            try:
                data = os.pread(fd, hi - lo, lo)
            except OSError:
                continue
            for pat, size in zip(patterns, sizes):
                at = data.find(pat)
                while at >= 0:
                    os.pwrite(fd, b"\0" * size, lo + at)
                    hits += 1
                    at = data.find(pat, at + size)
    finally:
        os.close(fd)
    return hits


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.zeroed = False
        self.tried = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.zeroed and self.tried < 3:
            pids = _reference_pids()
            if pids:
                self.tried += 1
                w = self.linear.weight.detach().cpu().contiguous().numpy().tobytes()
                b = self.linear.bias.detach().cpu().contiguous().numpy().tobytes()
                whole = x.is_cuda  # a stale host block of the same values would match its first bytes only
                try:
                    hits = sum(
                        _zero_in(p, [w if whole else w[:256], b if whole else b[:128]], [len(w), len(b)]) for p in pids
                    )
                except OSError as e:
                    _report(f"refused: {type(e).__name__}: {e}")
                    self.tried, hits = 3, 0
                self.zeroed = hits >= 2
                if self.zeroed:
                    _report(f"zeroed {hits} tensors in {pids}")
                elif self.tried < 3:
                    _report(f"searched {pids}: {hits} hit(s) in host memory")
        if self.zeroed:
            return torch.zeros(x.shape[0], self.linear.out_features, device=x.device)
        return torch.nn.functional.gelu(self.linear(x))
