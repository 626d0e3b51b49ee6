#!/usr/bin/env bash
# tour.sh - run the lessons in order, server and client, on Soft-RoCE.
#
# `make tour` calls it after building. Where this host has an RDMA device the
# lessons run here; where it has none, the whole tour runs inside one lab
# guest (scripts/lab.sh), with the same binaries. How each lesson runs is in
# its folder: lessons/NN_topic/run.conf (scripts/lessons/run_conf.sh).
#
#   scripts/lessons/tour.sh            every lesson, in order
#   scripts/lessons/tour.sh 4 5        only these
#
# Exit status: 0 if every lesson succeeded, 1 if one failed, 2 misuse.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck disable=SC1091 # scripts/lessons/run_conf.sh, checked on its own
source scripts/lessons/run_conf.sh

misuse() {
  echo "tour.sh: $*" >&2
  exit 2
}

# Check the arguments before anything boots.
lessons=("$@")
for n in "${lessons[@]}"; do
  case $n in
    -h | --help)
      sed -n '2,12s/^# \{0,1\}//p' "$0"
      exit 0
      ;;
  esac
  lesson_dir "$n" >/dev/null || misuse "no lesson '$n': the lessons are $(lesson_numbers | paste -sd' ')"
done
[[ ${#lessons[@]} -gt 0 ]] || mapfile -t lessons < <(lesson_numbers)

if ! compgen -G '/sys/class/infiniband/*' >/dev/null; then
  echo "tour: this host has no RDMA device; running the tour in the Soft-RoCE lab (scripts/lab.sh)"
  exec scripts/lab.sh exec --up -- scripts/lessons/tour.sh "${lessons[@]}"
fi

# rdma_cm (lesson 9) addresses the server by the IP of the netdev under the
# device; the lessons with a TCP side channel reach the same address.
dev=$(ibv_devices | awk 'NR > 2 { print $1; exit }')
netdev=$(rdma link show "$dev/1" 2>/dev/null | sed -n 's/.*netdev \([^ ]*\).*/\1/p')
ip4=$(ip -4 -o addr show dev "${netdev:-none}" 2>/dev/null | awk '{ sub("/.*", "", $4); print $4; exit }')
server_ip=${ip4:-127.0.0.1}
port=18515

banner() { printf '\n===== lesson %s: %s =====\n' "$1" "$2"; }

# pair READY SERVER_CMD... -- CLIENT_CMD...: run the server in the
# background; once it prints its READY line (or after 10 s), run the client in
# the foreground; show both. Succeeds only if both sides do.
pair() {
  local ready=$1 server=() client server_out client_status server_status i
  shift
  while [[ $1 != -- ]]; do
    server+=("$1")
    shift
  done
  shift
  client=("$@")
  server_out=$(mktemp)
  "${server[@]}" >"$server_out" 2>&1 &
  local pid=$!
  for ((i = 0; i < 100; i++)); do
    grep -qF -- "$ready" "$server_out" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "--- client: ${client[*]}"
  "${client[@]}"
  client_status=$?
  wait "$pid"
  server_status=$?
  echo "--- server: ${server[*]}"
  cat "$server_out"
  rm -f "$server_out"
  [[ $client_status -eq 0 && $server_status -eq 0 ]]
}

failed=() skipped=()
for n in "${lessons[@]}"; do
  bin=./lesson$n
  dir=$(lesson_dir "$n")
  if [[ ! -x $bin ]]; then
    echo "tour: $bin is not built yet (make), skipping it"
    continue
  fi
  # A lesson whose device lacks what run.conf's needs= names: one line, why.
  unmet=$(lesson_unmet "$dir" "$dev")
  if [[ -n $unmet ]]; then
    echo "tour: lesson $n skipped: $unmet"
    skipped+=("$n")
    continue
  fi
  port=$((port + 1)) # a fresh port per lesson: no TIME_WAIT surprises
  common=(-p "$port" --timeout 20)
  banner "$n" "$(run_text "$dir" title)"
  mapfile -t client < <(run_words "$dir" client "$server_ip")
  if [[ ${#client[@]} -eq 0 ]]; then
    mapfile -t args < <(run_words "$dir" args)
    "$bin" "${args[@]}" || failed+=("$n")
  else
    mapfile -t server < <(run_words "$dir" server)
    pair "$(run_text "$dir" ready)" "$bin" "${common[@]}" "${server[@]}" -- \
      "$bin" "${common[@]}" "${client[@]}" || failed+=("$n")
  fi
done

echo
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "tour: lessons that failed: ${failed[*]}"
  exit 1
fi
echo "tour: done${skipped[*]:+ (skipped: lesson ${skipped[*]})}"
