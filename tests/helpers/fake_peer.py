#!/usr/bin/env python3
"""fake_peer.py - a misbehaving lesson server, for the error-path tests.

It listens on 127.0.0.1:PORT, accepts one client and then, by MODE:

  silent                     says nothing (the client's bounded wait must fire)
  garbage                    sends 54 bytes that are not a PeerInfo
  offer LESSON ADDR LENGTH   sends a well-formed PeerInfo (exchange.hpp's wire
                             form) for LESSON that advertises a buffer at ADDR
                             (decimal or 0x...) of LENGTH bytes, rkey 0x1234

and then holds the connection open for up to 30 s, so the client alone
decides what happens. Usage: fake_peer.py PORT MODE [ARGS]
"""
import socket
import struct
import sys
import time


def peer_info(lesson, addr, length):
    gid = bytes(10) + b"\xff\xff" + bytes([192, 0, 2, 99])  # ::ffff:192.0.2.99, RoCE v2 style
    # magic, version 1, lesson, QPN, PSN, LID, GID, MTU enum 3 (1024), addr, length, rkey: big-endian
    return struct.pack(">4sHHIIH16sIQII", b"RDWB", 1, lesson, 0x123, 0x456, 0, gid, 3, addr, length, 0x1234)


def main():
    port, mode, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(1)
    print("fake peer listening", flush=True)
    srv.settimeout(30)
    conn, _ = srv.accept()
    if mode == "garbage":
        conn.sendall(b"HTTP/1.0 200 OK\r\n".ljust(54, b"x"))  # not a PeerInfo: wrong magic
    elif mode == "offer":
        conn.sendall(peer_info(int(args[0]), int(args[1], 0), int(args[2], 0)))
    elif mode != "silent":
        sys.exit("fake_peer.py: unknown mode " + mode)
    conn.settimeout(30)
    try:
        while conn.recv(4096):  # until the client closes, or 30 s of quiet
            pass
    except OSError:
        pass
    time.sleep(0.1)


if __name__ == "__main__":
    main()
