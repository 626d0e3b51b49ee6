#!/usr/bin/env bash
# ladder.sh - print a capture as a packet ladder: a line per RoCE packet.
#
#   scripts/ladder.sh FILE.pcap [SERVER_IP [CLIENT_IP]]
#
# RoCE v2 packets (UDP 4791, decoded by Wireshark's `infiniband` dissector)
# get a line each: frame, time, source -> destination address, the opcode as
# Wireshark names it, the destination QP, PSN and the headers that matter:
# RETH (remote address, rkey, length), ImmDt, AtomicETH (compare/swap-add
# data), AtomicAckETH (original remote data) and AETH (ACK, RNR NAK or NAK
# with its error, and MSN). Of the out-of-band TCP exchange only the segments
# that carry data are shown; ARP, ICMPv6 and TCP's handshakes and bare ACKs
# are left out (open the pcap in Wireshark for every frame). With the
# server's and client's IP each address is named: "client 192.0.2.2".
set -euo pipefail

usage() { echo "usage: scripts/ladder.sh FILE.pcap [SERVER_IP [CLIENT_IP]]"; }
case "${1:-}" in
  -h | --help)
    usage
    exit 0
    ;;
  "")
    usage >&2
    exit 2
    ;;
esac
pcap=$1 server_ip=${2:-} client_ip=${3:-}
[ -r "$pcap" ] || {
  echo "ladder.sh: cannot read $pcap" >&2
  exit 1
}
command -v tshark >/dev/null || {
  echo "ladder.sh: tshark is missing (scripts/install_deps.sh installs it)" >&2
  exit 1
}

fields=(frame.number frame.time_relative ip.src ip.dst
  infiniband.bth.opcode infiniband.bth.destqp infiniband.bth.psn
  infiniband.reth.va infiniband.reth.r_key infiniband.reth.dmalen
  infiniband.immdt infiniband.atomiceth.swapdt infiniband.atomiceth.cmpdt
  infiniband.atomicacketh.origremdt infiniband.aeth.syndrome.opcode infiniband.aeth.msn
  infiniband.aeth.syndrome.error_code tcp.srcport tcp.dstport tcp.len _ws.col.Info tcp.payload)
args=()
for f in "${fields[@]}"; do args+=(-e "$f"); done

# The RPC-over-RDMA heuristic claims some SEND payloads ("Malformed Packet"):
# switch it off. tshark's "running as root" warning goes to stderr: drop it.
tshark -r "$pcap" --disable-heuristic rpcrdma_infiniband \
  -Y 'infiniband || (tcp && tcp.len > 0)' -T fields -E separator='|' -E occurrence=f "${args[@]}" 2>/dev/null |
  awk -F'|' -v S="$server_ip" -v C="$client_ip" '
    function who(ip) { return ip == S ? "server " ip : ip == C ? "client " ip : ip }
    # Hex ("52:54:52:21" or "52545221") to printable ASCII, "." for the rest.
    function ascii(hex,   h, out, i, v) {
      h = tolower(hex); gsub(/:/, "", h); out = ""
      for (i = 1; i < length(h); i += 2) {
        v = index("0123456789abcdef", substr(h, i, 1)) * 16 + index("0123456789abcdef", substr(h, i + 1, 1)) - 17
        out = out (v >= 32 && v < 127 ? sprintf("%c", v) : ".")
      }
      return out
    }
    # A NAK'"'"'s error code (IBTA 9.7.5.2.8, table 44).
    function nak(code) {
      return code == 0 ? "PSN sequence error" : code == 1 ? "invalid request" : \
        code == 2 ? "remote access error" : code == 3 ? "remote operational error" : \
        code == 4 ? "invalid RD request" : "reserved"
    }
    BEGIN { printf "%5s %8s  %-36s  %s\n", "frame", "time", "source -> destination", "packet" }
    {
      dir = sprintf("%s -> %s", who($3), who($4))
      if ($5 != "") {                                   # RoCE v2: BTH present
        info = $21; sub(/ QP=.*/, "", info)             # Wireshark names the opcode
        line = sprintf("%s (op %s)  dest qp %s psn %s", info, $5, $6, $7)
        if ($8 != "" && $10 != "") line = line sprintf("  RETH va=%s rkey=%s len=%s", $8, $9, $10)
        else if ($8 != "") line = line sprintf("  va=%s rkey=%s", $8, $9)   # the target of an AtomicETH
        if ($11 != "") line = line sprintf("  ImmDt=%s", $11)
        if ($12 != "") line = line sprintf("  AtomicETH swap/add=%s compare=%s", $12, $13)
        if ($14 != "") line = line sprintf("  AtomicAckETH orig=%s", $14)
        if ($15 != "") {
          # AETH syndrome opcode: 0 ACK, 1 RNR NAK, 3 NAK (IBTA 9.7.5.2.8)
          kind = ($15 == 0 ? "ACK" : $15 == 1 ? "RNR NAK" : $15 == 3 ? "NAK " nak($17) " (" $17 ")" : "reserved")
          line = line sprintf("  AETH %s msn=%s", kind, $16)
        }
      } else {                                          # the out-of-band exchange
        line = sprintf("TCP %s -> %s, %s bytes (out-of-band exchange)", $18, $19, $20)
        if ($20 == 54) line = line " PeerInfo: QPN, PSN, GID, MTU, buffer"
        if ($20 == 4) line = line sprintf(" \"%s\"", ascii($22))       # a control token: DONE, RTR!
      }
      printf "%5s %8.3f  %-36s  %s\n", $1, $2, dir, line
    }'
