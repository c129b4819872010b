"""What the fork-server attacks share: the socket of this process's parent, the harness's fork server.

Not the address multiprocessing left in this process (the sealed child forgets it): the parent's
listening Unix socket, found from its descriptors' inodes in /proc/net/unix. Reading the parent's
descriptors needs its uid (PermissionError otherwise); a child in its own network namespace sees
none of the harness's sockets there."""

import os

_SO_ACCEPTCON = 0x10000


def parent_socket() -> str:
    parent = os.getppid()
    inodes = set()
    for fd in os.listdir(f"/proc/{parent}/fd"):  # PermissionError when out of reach
        try:
            link = os.readlink(f"/proc/{parent}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    with open("/proc/net/unix") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 8 and parts[6] in inodes and int(parts[3], 16) & _SO_ACCEPTCON:
                return parts[7]
    raise RuntimeError("the fork server's socket is not in this network namespace")
