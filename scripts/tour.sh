#!/usr/bin/env bash
# tour.sh - run the lessons in order, server and client, on Soft-RoCE.
#
# `make tour` calls it after building. Where this host has an RDMA device the
# lessons run here; where it has none, the whole tour runs inside one lab
# guest (scripts/lab.sh), with the same binaries.
#
#   scripts/tour.sh            lessons 1..9 (those that are built)
#   scripts/tour.sh 4 5        only these
set -uo pipefail
cd "$(dirname "$0")/.."

if ! compgen -G '/sys/class/infiniband/*' >/dev/null; then
  echo "tour: this host has no RDMA device; running the tour in the Soft-RoCE lab (scripts/lab.sh)"
  exec scripts/lab.sh run -- scripts/tour.sh "$@"
fi

lessons=("$@")
[ ${#lessons[@]} -gt 0 ] || lessons=(1 2 3 4 5 6 7 8 9)

# rdma_cm (lesson 9) addresses the peer by the IP of the netdev under the
# device; the lessons with a TCP side channel can use loopback.
dev=$(ibv_devices | awk 'NR > 2 { print $1; exit }')
netdev=$(rdma link show "$dev/1" 2>/dev/null | sed -n 's/.*netdev \([^ ]*\).*/\1/p')
ip4=$(ip -4 -o addr show dev "${netdev:-none}" 2>/dev/null | awk '{ sub("/.*", "", $4); print $4; exit }')
port=18515

banner() { printf '\n===== lesson %s: %s =====\n' "$1" "$2"; }

# Run a server in the background and its client in the foreground; show both.
pair() {
  local server_out client_status server_status
  server_out=$(mktemp)
  "${server[@]}" >"$server_out" 2>&1 &
  local pid=$!
  sleep 0.5
  echo "--- client: ${client[*]}"
  "${client[@]}"
  client_status=$?
  wait "$pid"
  server_status=$?
  echo "--- server: ${server[*]}"
  cat "$server_out"
  rm -f "$server_out"
  [ "$client_status" -eq 0 ] && [ "$server_status" -eq 0 ]
}

failed=()
for n in "${lessons[@]}"; do
  bin=./lesson$n
  if [ ! -x "$bin" ]; then
    echo "tour: $bin is not built yet (make), skipping it"
    continue
  fi
  port=$((port + 1)) # a fresh port per lesson: no TIME_WAIT surprises
  common=(-p "$port" --timeout 20)
  case $n in
    1)
      banner 1 "device query"
      $bin
      ;;
    2)
      banner 2 "memory registration"
      $bin
      ;;
    3)
      banner 3 "the QP state machine"
      $bin
      ;;
    4)
      banner 4 "SEND/RECV: the sum"
      server=($bin "${common[@]}")
      client=($bin "${common[@]}" 127.0.0.1 -- 20 -22)
      pair
      ;;
    5)
      banner 5 "RDMA WRITE with immediate"
      server=($bin "${common[@]}")
      client=($bin "${common[@]}" 127.0.0.1 "written by the client")
      pair
      ;;
    6)
      banner 6 "RDMA READ"
      server=($bin "${common[@]}")
      client=($bin "${common[@]}" 127.0.0.1)
      pair
      ;;
    7)
      banner 7 "atomics"
      server=($bin "${common[@]}")
      client=($bin "${common[@]}" 127.0.0.1)
      pair
      ;;
    8)
      banner 8 "event-driven completions"
      server=($bin "${common[@]}")
      client=($bin "${common[@]}" -n 3 127.0.0.1 2 3)
      pair
      ;;
    9)
      banner 9 "rdma_cm"
      server=($bin "${common[@]}")
      client=($bin "${common[@]}" "${ip4:-127.0.0.1}" 2 3)
      pair
      ;;
    *)
      echo "tour: no lesson $n"
      false
      ;;
  esac || failed+=("$n")
done

echo
if [ ${#failed[@]} -gt 0 ]; then
  echo "tour: lessons that failed: ${failed[*]}"
  exit 1
fi
echo "tour: done"
