#!/usr/bin/env python3
"""kill_relay.py - make a lesson server die at the worst moment, for real.

It sits on the out-of-band TCP connection between a lesson's client and its
server: it listens on 127.0.0.1:LISTEN, accepts one client, connects it to the
server on 127.0.0.1:SERVER and relays both ways. When the server sends TOKEN
(its "RTR!" or "GO!!": the client's signal to start its RDMA), the relay first
kills the server with SIGKILL and waits until it has exited, so that its QP is
gone, then passes the token on and closes the connection, as the dead server's
kernel would. The client, believing the server ready, sends to a QP that no
longer exists. The moment the token went on is written to STAMP (seconds
since the epoch), so a test can time what the client did next.

Usage: kill_relay.py LISTEN SERVER SERVER_PID TOKEN STAMP

SERVER_PID "-" means the process that listens on 127.0.0.1:SERVER, found in
/proc (the test runs the relay where the server runs, and may know only its
own PID for it, not the server's).
"""
import os
import select
import signal
import socket
import sys
import time


def wait_gone(pid, limit=10.0):
    """Until pid has exited (gone, or a zombie whose files are closed)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except (FileNotFoundError, ProcessLookupError):
            # Gone: before the open, or (ESRCH) between the open and the
            # read, as it was reaped (seen once in a fresh-clone .ci/run:
            # the relay then died and wrote no stamp).
            return
        time.sleep(0.01)
    sys.exit(f"kill_relay.py: process {pid} did not exit within {limit} s")


def listener_pid(port):
    """The PID of the process with a TCP socket listening on port."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.readlines()[1:]:
                fields = row.split()
                # local_address is HEXIP:HEXPORT; state 0A is LISTEN.
                if int(fields[1].split(":")[-1], 16) == port and fields[3] == "0A":
                    inodes.add(f"socket:[{fields[9]}]")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return int(pid)
        except OSError:
            continue
    sys.exit(f"kill_relay.py: no process listens on port {port}")


def main():
    listen, server, token, stamp = int(sys.argv[1]), int(sys.argv[2]), sys.argv[4], sys.argv[5]
    pid = listener_pid(server) if sys.argv[3] == "-" else int(sys.argv[3])
    token = token.encode()
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", listen))
    srv.listen(1)
    print("relay listening", flush=True)
    srv.settimeout(30)
    client, _ = srv.accept()
    upstream = socket.create_connection(("127.0.0.1", server), timeout=10)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([client, upstream], [], [], 1.0)
        for s in ready:
            data = s.recv(4096)
            if not data:
                sys.exit("kill_relay.py: a side closed before the server sent " + token.decode())
            if s is client:
                upstream.sendall(data)
                continue
            if token in data:
                os.kill(pid, signal.SIGKILL)
                wait_gone(pid)
                client.sendall(data)
                with open(stamp, "w") as f:
                    f.write(f"{time.time():.6f}\n")
                client.close()
                print("relay: killed the server, passed " + token.decode() + " on, closed", flush=True)
                return
            client.sendall(data)
    sys.exit("kill_relay.py: the server never sent " + token.decode() + " within 30 s")


if __name__ == "__main__":
    main()
