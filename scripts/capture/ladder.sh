#!/usr/bin/env bash
# ladder.sh - print a capture as a packet ladder: a line per RoCE packet.
#
#   scripts/capture/ladder.sh FILE.pcap [SERVER_IP [CLIENT_IP]]
#
# RoCE v2 packets (UDP 4791, decoded by Wireshark's `infiniband` dissector)
# get a line each: frame, time, source -> destination address, the opcode as
# Wireshark names it, the destination QP, PSN and the headers that matter:
# RETH (remote address, rkey, length), ImmDt, AtomicETH (compare/swap-add
# data), AtomicAckETH (original remote data) and AETH: ACK, RNR NAK with its
# timer in milliseconds, or NAK with its error; and the MSN. A request whose
# destination (address, QP, PSN) was already on the wire is a retransmission:
# its line ends "RETRANSMIT (first: frame N)". Of the out-of-band TCP
# exchange only the segments that carry data are shown; ARP, ICMPv6 and
# TCP's handshakes and bare ACKs are left out (open the pcap in Wireshark
# for every frame). With the server's and client's IP each address is
# named: "client 192.0.2.2".
#
# The header fields are read from the columns of the workbook's Wireshark
# profile, docs/wireshark-profile/RDMA-Workbook (tshark -C RDMA-Workbook), so that
# this ladder and the Wireshark window (make wireshark-profile) show the same
# fields; the profile also switches off the payload heuristics (RPC-over-RDMA...).
set -euo pipefail

usage() { echo "usage: scripts/capture/ladder.sh FILE.pcap [SERVER_IP [CLIENT_IP]]"; }
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
[[ -r $pcap ]] || {
  echo "ladder.sh: cannot read $pcap" >&2
  exit 1
}
command -v tshark >/dev/null || {
  echo "ladder.sh: tshark is missing (scripts/install_deps.sh installs it)" >&2
  exit 1
}
profile=$(cd "$(dirname "$0")/../.." && pwd)/docs/wireshark-profile/RDMA-Workbook
[[ -r $profile/preferences ]] || {
  echo "ladder.sh: the Wireshark profile is missing: $profile/preferences" >&2
  exit 1
}

# The profile's columns this ladder prints, by title (the profile's
# preferences name each one's field). A missing title is an error: the
# ladder and the profile must not drift apart.
columns=("Dest QP" PSN "RETH VA" rkey "DMA len" ImmDt Swap/Add Compare Orig MSN Info)
for c in "${columns[@]}"; do
  grep -q "^[[:space:]]*\"$c\", " "$profile/preferences" || {
    echo "ladder.sh: the profile $profile has no column \"$c\"" >&2
    exit 1
  }
done
# The numbers the ladder decides on, read raw: the BTH opcode, the AETH
# syndrome's opcode, NAK code and RNR timer, and the TCP segment.
raw=(frame.number frame.time_relative ip.src ip.dst infiniband.bth.opcode
  infiniband.aeth.syndrome.opcode infiniband.aeth.syndrome.error_code infiniband.aeth.syndrome.timer
  tcp.srcport tcp.dstport tcp.len tcp.payload)
args=() names=()
for f in "${raw[@]}"; do args+=(-e "$f") names+=("$f"); done
for c in "${columns[@]}"; do args+=(-e "_ws.col.$c") names+=("$c"); done

# tshark -C finds a profile under its configuration folder: give it one of
# its own that holds only the workbook's profile, so that nothing of the
# user's own Wireshark settings changes the ladder.
conf=$(mktemp -d)
trap 'rm -rf "$conf"' EXIT
mkdir -p "$conf/wireshark/profiles"
ln -s "$profile" "$conf/wireshark/profiles/RDMA-Workbook"

# tshark's "running as root" warning goes to stderr: drop it.
XDG_CONFIG_HOME=$conf tshark -C RDMA-Workbook -r "$pcap" \
  -Y 'infiniband || (tcp && tcp.len > 0)' -T fields -E separator='|' -E occurrence=f "${args[@]}" 2>/dev/null |
  awk -F'|' -v S="$server_ip" -v C="$client_ip" -v NAMES="$(
    IFS='|'
    echo "${names[*]}"
  )" '
    function who(ip) { return ip == S ? "server " ip : ip == C ? "client " ip : ip }
    function v(name) { return $(col[name]) }
    # Hex ("52:54:52:21" or "52545221") to printable ASCII, "." for the rest.
    function ascii(hex,   h, out, i, x) {
      h = tolower(hex); gsub(/:/, "", h); out = ""
      for (i = 1; i < length(h); i += 2) {
        x = index("0123456789abcdef", substr(h, i, 1)) * 16 + index("0123456789abcdef", substr(h, i + 1, 1)) - 17
        out = out (x >= 32 && x < 127 ? sprintf("%c", x) : ".")
      }
      return out
    }
    # A NAK'"'"'s error code (IBTA 9.7.5.2.8, table 44).
    function nak(code) {
      return code == 0 ? "PSN sequence error" : code == 1 ? "invalid request" : \
        code == 2 ? "remote access error" : code == 3 ? "remote operational error" : \
        code == 4 ? "invalid RD request" : "reserved"
    }
    # An RC request: SEND, RDMA WRITE, RDMA READ Request, CmpSwap, FetchAdd
    # (RC opcodes 0-12, 19, 20); 13-16 are READ responses, 17-18 acknowledgements.
    function request(op) { return op <= 12 || op == 19 || op == 20 }
    BEGIN {
      n = split(NAMES, name, "|")
      for (i = 1; i <= n; i++) col[name[i]] = i
      # The RNR NAK timer: how long the requester waits before it sends again,
      # in ms (IBTA 9.7.5.2.8, table 45); 0 is the longest.
      split("655.36 0.01 0.02 0.03 0.04 0.06 0.08 0.12 0.16 0.24 0.32 0.48 0.64 0.96 1.28 1.92 " \
        "2.56 3.84 5.12 7.68 10.24 15.36 20.48 30.72 40.96 61.44 81.92 122.88 163.84 245.76 327.68 491.52", rnr_ms, " ")
      printf "%5s %8s  %-36s  %s\n", "frame", "time", "source -> destination", "packet"
    }
    {
      dir = sprintf("%s -> %s", who(v("ip.src")), who(v("ip.dst")))
      op = v("infiniband.bth.opcode")
      if (op != "") {                                   # RoCE v2: BTH present
        info = v("Info"); sub(/ QP=.*/, "", info)       # Wireshark names the opcode
        line = sprintf("%s (op %s)  dest qp %s psn %s", info, op, v("Dest QP"), v("PSN"))
        if (v("RETH VA") != "" && v("DMA len") != "") line = line sprintf("  RETH va=%s rkey=%s len=%s", v("RETH VA"), v("rkey"), v("DMA len"))
        else if (v("RETH VA") != "") line = line sprintf("  va=%s rkey=%s", v("RETH VA"), v("rkey"))   # the target of an AtomicETH
        if (v("ImmDt") != "") line = line sprintf("  ImmDt=%s", v("ImmDt"))
        if (v("Swap/Add") != "") line = line sprintf("  AtomicETH swap/add=%s compare=%s", v("Swap/Add"), v("Compare"))
        if (v("Orig") != "") line = line sprintf("  AtomicAckETH orig=%s", v("Orig"))
        syn = v("infiniband.aeth.syndrome.opcode")
        if (syn != "") {
          # AETH syndrome opcode: 0 ACK, 1 RNR NAK, 3 NAK (IBTA 9.7.5.2.8)
          t = v("infiniband.aeth.syndrome.timer"); e = v("infiniband.aeth.syndrome.error_code")
          kind = syn == 0 ? "ACK" : syn == 1 ? sprintf("RNR NAK timer %s ms (%s)", rnr_ms[t + 1], t) : \
            syn == 3 ? sprintf("NAK %s (%s)", nak(e), e) : "reserved"
          line = line sprintf("  AETH %s msn=%s", kind, v("MSN"))
        }
        key = v("ip.dst") " " v("Dest QP") " " v("PSN")
        if (op < 32 && request(op)) {
          if (key in first) line = line sprintf("  RETRANSMIT (first: frame %s)", first[key])
          else first[key] = v("frame.number")
        }
      } else {                                          # the out-of-band exchange
        len = v("tcp.len")
        line = sprintf("TCP %s -> %s, %s bytes (out-of-band exchange)", v("tcp.srcport"), v("tcp.dstport"), len)
        if (len == 54) line = line " PeerInfo: QPN, PSN, GID, MTU, buffer"
        if (len == 4) line = line sprintf(" \"%s\"", ascii(v("tcp.payload")))   # a control token: DONE, RTR!
      }
      printf "%5s %8.3f  %-36s  %s\n", v("frame.number"), v("frame.time_relative"), dir, line
    }'
