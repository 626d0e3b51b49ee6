#!/usr/bin/env python3
"""fake_peer.py - a misbehaving lesson peer, for the error-path tests.

As a server it listens on 127.0.0.1:PORT, accepts one client and then, by MODE:

  silent                     says nothing (the client's bounded wait must fire)
  garbage                    sends 54 bytes that are not a PeerInfo
  offer LESSON ADDR LENGTH   sends a well-formed PeerInfo (exchange.hpp's wire
                             form) for LESSON that advertises a buffer at ADDR
                             (decimal or 0x...) of LENGTH bytes, rkey 0x1234
  rtr LESSON IPV4            sends a PeerInfo for LESSON naming QP 0x123 (which
                             does not exist) at GID ::ffff:IPV4, then the
                             "RTR!" token a lesson server sends once its QP is
                             in RTR; it offers no buffer (address, length and
                             rkey 0); the client's SENDs then go nowhere
  rtr-close LESSON IPV4      the same, then closes the connection at once
                             (a server that exits after the exchange)

As a client (MODE client LESSON IPV4 [TEXT]) it connects to 127.0.0.1:PORT,
retrying for up to 20 s (the server may start after us), and sends the same
PeerInfo; with TEXT, it then reads the server's PeerInfo and 4-byte token
(lesson 13's "GO!!") and sends TEXT, e.g. "DO": half of a DONE.

Except for rtr-close, it then holds the connection open for up to 30 s, so
the lesson alone decides what happens. It prints "fake peer listening" (or
"fake peer started") once it is ready. Usage: fake_peer.py PORT MODE [ARGS]
"""
import ipaddress
import socket
import struct
import sys
import time


def peer_info(lesson, addr=0, length=0, rkey=0, ipv4="192.0.2.99"):
    # ::ffff:a.b.c.d, the RoCE v2 IPv4-mapped GID
    gid = bytes(10) + b"\xff\xff" + ipaddress.IPv4Address(ipv4).packed
    # magic, version 1, lesson, QPN, PSN, LID, GID, MTU enum 3 (1024), addr, length, rkey: big-endian
    return struct.pack(">4sHHIIH16sIQII", b"RDWB", 1, lesson, 0x123, 0x456, 0, gid, 3, addr, length, rkey)


def accept_one(port):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(1)
    print("fake peer listening", flush=True)
    srv.settimeout(30)
    conn, _ = srv.accept()
    return conn


def connect(port):
    print("fake peer started", flush=True)
    for _ in range(200):  # 20 s
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=30)
        except OSError:
            time.sleep(0.1)
    sys.exit("fake_peer.py: nothing listened on 127.0.0.1:%d within 20 s" % port)


def recv_exactly(conn, n):
    conn.settimeout(30)
    got = b""
    while len(got) < n:
        chunk = conn.recv(n - len(got))
        if not chunk:
            break
        got += chunk
    return got


def main():
    port, mode, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    if mode == "client":
        conn = connect(port)
        conn.sendall(peer_info(int(args[0]), ipv4=args[1]))
        if len(args) > 2:
            recv_exactly(conn, 54 + 4)
            conn.sendall(args[2].encode())
            print("fake peer sent " + args[2], flush=True)
    else:
        conn = accept_one(port)
        if mode == "garbage":
            conn.sendall(b"HTTP/1.0 200 OK\r\n".ljust(54, b"x"))  # not a PeerInfo: wrong magic
        elif mode == "offer":
            conn.sendall(peer_info(int(args[0]), int(args[1], 0), int(args[2], 0), rkey=0x1234))
        elif mode in ("rtr", "rtr-close"):
            conn.sendall(peer_info(int(args[0]), ipv4=args[1]) + b"RTR!")
            if mode == "rtr-close":
                # Read the client's PeerInfo first: closing with unread data
                # would send a reset, which can discard what we sent.
                recv_exactly(conn, 54)
                conn.close()
                return
        elif mode != "silent":
            sys.exit("fake_peer.py: unknown mode " + mode)
    conn.settimeout(30)
    try:
        while conn.recv(4096):  # until the lesson closes, or 30 s of quiet
            pass
    except OSError:
        pass
    time.sleep(0.1)


if __name__ == "__main__":
    main()
