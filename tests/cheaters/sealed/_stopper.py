"""Run by the sealed attacks as a separate process: stops and resumes the reference child (50% duty)
while it runs, so the reference looks twice as slow; exits when the candidate (argv[1]) is gone, or
after 150 s. Writes 'running' to argv[2] (if given) once it has found the reference.

Only its own harness's reference: a child of the fork server that started the candidate (on a shared
machine another harness's reference, stopped by a stopper frozen or killed between its SIGSTOP and
SIGCONT, would stay stopped)."""

import os
import signal
import sys
import time

me, report = int(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else "")
end = time.time() + 150


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


try:
    server = _ppid(me)  # the fork server that started the candidate, and its reference
except (OSError, ValueError, IndexError):
    server = -1


def references() -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                if os.readlink(f"/proc/{d}/fd/1").endswith(".reference.log") and _ppid(int(d)) == server:
                    out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


found: list[int] = []
last = 0.0
while time.time() < end:
    try:
        os.kill(me, 0)
        with open(f"/proc/{me}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
    except OSError:
        break
    if time.time() - last > 0.3:
        found, last = references(), time.time()
        if found and report:
            with open(report, "w") as f:
                f.write("running")
    for p in found:
        try:
            with open(f"/proc/{p}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            if state != "T":
                os.kill(p, signal.SIGSTOP)
                time.sleep(0.002)
                os.kill(p, signal.SIGCONT)
        except OSError:
            pass
    time.sleep(0.002)
