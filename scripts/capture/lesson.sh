#!/usr/bin/env bash
# capture/lesson.sh - run lesson N across two lab guests and decode the wire.
#
#   scripts/capture/lesson.sh N          (what `make capture LESSON=N` runs)
#   scripts/capture/lesson.sh N SCENARIO (make capture LESSON=10 SCENARIO=rnr)
#
# Guest a (192.0.2.1) runs the lesson's server, guest b (192.0.2.2) its
# client, as the lesson's run.conf says (scripts/lessons/run_conf.sh); a virtual
# cable joins them and every frame on it is written to captures/lessonN.pcap
# on this host. Then the packet ladder is printed (scripts/capture/ladder.sh): open
# the pcap in Wireshark for the full decode (docs/wireshark.md).
#
# A lesson whose run.conf lists scenarios= (lesson 10) takes one of them as
# SCENARIO: its client then runs with run.conf's client_scenario= words,
# {scenario} standing for the name, and the pcap is captures/lessonN-SCENARIO.pcap.
# Both sides run the program that plays it: ./lessonN for scenarios=, the
# lesson's second program for its scenarios_PROGRAM= (./lesson10_nak).
#
# Exit status: the lab's (a's if non-zero, else b's); 1 if nothing was
# captured; 2 misuse (no such lesson, one without a peer, or a scenario the
# lesson does not have).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck disable=SC1091 # scripts/lessons/run_conf.sh, checked on its own
source scripts/lessons/run_conf.sh

misuse() {
  echo "capture/lesson.sh: $*" >&2
  exit 2
}

# The lessons with a client: the ones there is a wire to capture.
two_sided=()
for l in $(lesson_numbers); do
  if [[ -n $(run_text "$(lesson_dir "$l")" client) ]]; then two_sided+=("$l"); fi
done

n=${1:-} scenario=${2:-}
case $n in
  -h | --help)
    sed -n '2,/^$/s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
  "") misuse "which lesson? make capture LESSON=N (N is one of ${two_sided[*]})" ;;
esac
dir=$(lesson_dir "$n") || misuse "no lesson '$n'; lessons ${two_sided[*]} have two sides to capture"
[[ -n $(run_text "$dir" client) ]] ||
  misuse "lesson $n has no peer, so nothing crosses a wire; lessons ${two_sided[*]} do"
program=lesson$n
if [[ -n $scenario ]]; then
  mapfile -t scenarios < <(lesson_scenarios "$dir")
  [[ ${#scenarios[@]} -gt 0 ]] || misuse "lesson $n has no scenarios; SCENARIO is for a lesson that lists them (lesson 10)"
  program=$(scenario_program "$dir" "$n" "$scenario") ||
    misuse "lesson $n has no scenario '$scenario'; its scenarios are ${scenarios[*]}"
fi
[[ -x ./$program ]] || {
  echo "capture/lesson.sh: ./$program is not built: run make" >&2
  exit 1
}

server_ip=192.0.2.1 client_ip=192.0.2.2 # documentation range: never leaves the guests
# run.conf's capture=netns (lesson 18): one guest, two network namespaces
# joined by a veth pair (lessons/18_netns/netns_pair.sh), their addresses.
netns=""
if [[ $(run_text "$dir" capture) == netns ]]; then
  netns=1 server_ip=198.51.100.1 client_ip=198.51.100.2
fi
opts=(--timeout 60)
mapfile -t server_args < <(run_words "$dir" server)
pcap=captures/lesson$n.pcap
if [[ -n $scenario ]]; then
  client_args=()
  while IFS= read -r word; do client_args+=("${word//\{scenario\}/$scenario}"); done \
    < <(run_words "$dir" client_scenario "$server_ip")
  pcap=captures/lesson$n-$scenario.pcap
else
  mapfile -t client_args < <(run_words "$dir" client "$server_ip")
fi

mkdir -p captures
rm -f "$pcap"
if [[ -n $netns ]]; then
  echo "capture: lesson $n, server in namespace ns_a ($server_ip), client in ns_b ($client_ip), one guest, veth_a -> $pcap"
else
  echo "capture: lesson $n${scenario:+ scenario $scenario (./$program)}, server on guest a ($server_ip), client on guest b ($client_ip), wire -> $pcap"
fi
status=0
# b's client starts once a's server has printed run.conf's ready= line, so
# that it never knocks before the server listens (rdma_cm would reject it).
ready=()
[[ -z $(run_text "$dir" ready) ]] || ready=(--ready "$(run_text "$dir" ready)")
# Each guest's vCPUs: LAB_CPUS if set, else run.conf's lab_cpus= (lesson
# 11: 2) as far as this host's cores go, else 1.
cpus=$(run_text "$dir" lab_cpus)
if [[ $cpus =~ ^[0-9]+$ ]] && ((cpus > $(nproc))); then cpus=$(nproc); fi
# The guests' kernel: LAB_KERNEL if set, else run.conf's lab_kernel= (lesson
# 16: trixie-backports, for ODP), else the lab's default.
kernel=${LAB_KERNEL:-$(run_text "$dir" lab_kernel)}
# lab.sh pair runs each side as a bash command line: quote every word.
a_opts=() b_opts=()
[[ -z $netns ]] || a_opts=(--netns ns_a) b_opts=(--netns ns_b)
a_cmd=$(printf '%q ' "./$program" "${opts[@]}" "${a_opts[@]}" "${server_args[@]}")
b_cmd=$(printf '%q ' "./$program" "${opts[@]}" "${b_opts[@]}" "${client_args[@]}")
if [[ -n $netns ]]; then
  # A lab of its own, up for this capture only; scripts/capture/netns.sh
  # writes the pcap into its xfer folder, the one the guest may write.
  lab_dir=$(mktemp -d)
  trap 'LAB_UP_DIR=$lab_dir scripts/lab.sh down >/dev/null 2>&1; rm -rf "$lab_dir" "$lab_dir.lock"' EXIT
  export LAB_UP_DIR=$lab_dir
  LAB_KERNEL=$kernel LAB_CPUS=${LAB_CPUS:-${cpus:-1}} scripts/lab.sh up
  xfer=$(scripts/lab.sh xfer)
  scripts/lab.sh exec --timeout 300 -- scripts/capture/netns.sh "$xfer/wire.pcap" "$(run_text "$dir" ready)" \
    "$a_cmd" "$b_cmd" || status=$?
  # The guest wrote it: a plain file, or nothing (never follow a link it made).
  if [[ -f $xfer/wire.pcap && ! -L $xfer/wire.pcap ]]; then cp -- "$xfer/wire.pcap" "$pcap"; fi
else
  LAB_KERNEL=$kernel LAB_CPUS=${LAB_CPUS:-${cpus:-1}} scripts/lab.sh pair --pcap "$pcap" "${ready[@]}" \
    --a "$a_cmd" --b "$b_cmd" || status=$?
fi
echo
if [[ ! -s $pcap ]]; then
  echo "capture/lesson.sh: no capture was written (lab exit status $status)" >&2
  exit 1
fi
echo "packet ladder of $pcap (server $server_ip, client $client_ip):"
scripts/capture/ladder.sh "$pcap" "$server_ip" "$client_ip"
exit "$status"
