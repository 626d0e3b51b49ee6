# run_conf.sh - find a lesson by number and read how to run it.
# Sourced by scripts/lessons/tour.sh and scripts/capture/lesson.sh, so that adding a
# lesson is one new folder: lessons/NN_topic/ with lessonN.cpp and run.conf.
#
# run.conf holds one key=value a line (# starts a comment):
#   title=SEND/RECV: the sum        the lesson in a few words (the tour's banner)
#   server=--message "some text"    the server's arguments
#   ready=server: waiting for a     the server's line that says clients may come
#   client={server} 2 3             the client's arguments; {server} stands for
#                                   the server's address
#   args=...                        a lesson with no client runs alone, with these
#   scenarios=rnr retry             a lesson made of scenarios (lesson 10): the ones
#                                   lessonN plays, each as make capture LESSON=N
#                                   SCENARIO=NAME runs it (scripts/capture/lesson.sh)
#   scenarios_lesson10_nak=len      the ones the lesson's second program plays
#                                   (./lesson10_nak, lesson10_nak.cpp)
#   client_scenario={server} {scenario}  a scenario's client arguments;
#                                   {scenario} stands for its name
#   captures=rnr nak                the scenarios `make captures` records, each as
#                                   make capture LESSON=N SCENARIO=NAME runs it
#                                   (scripts/capture/shipped.sh); none: one plain capture
#   lab_cpus=2                      vCPUs for each lab guest of its capture
#                                   (LAB_CPUS, docs/lab.md); at most the host's
#                                   cores; LAB_CPUS, if set, decides instead
#   needs=odp                       what the device must offer (odp: on-demand
#                                   paging); where it does not, make tour and
#                                   make check skip the lesson with one line
#   lab_kernel=trixie-backports     the LAB_KERNEL its capture's guests boot
#                                   (docs/lab.md); LAB_KERNEL, if set, decides
#   races=rnr                       what load decides on its wire, left out when
#                                   a fresh capture is compared with the shipped
#                                   one (scripts/capture/shipped.sh): rnr, whether
#                                   a SEND found the receive queue empty
#   capture=netns                   its capture runs in one guest, the server in
#                                   network namespace ns_a and the client in ns_b,
#                                   joined by a veth pair (lesson 18:
#                                   scripts/capture/netns.sh)
# A value is split into words as the shell would: quotes group words, and
# nothing is expanded or run. The scripts add -p PORT and --timeout.
# shellcheck shell=bash

# A lesson is numbered by its lessonN.cpp; a second program beside it
# (lesson12_mcast.cpp, lesson15_probe.cpp) is part of lesson N, not a lesson.

# lesson_dir N: the folder of lesson N (lessons/NN_topic); fails, printing
# nothing, when N is not a lesson's number.
lesson_dir() {
  local n=$1 srcs
  [[ $n =~ ^[1-9][0-9]*$ ]] || return 1
  srcs=(lessons/*/"lesson$n.cpp")
  [[ -e ${srcs[0]} ]] || return 1
  dirname "${srcs[0]}"
}

# lesson_numbers: every lesson's number, in order, one a line.
lesson_numbers() {
  local src
  for src in lessons/*/lesson*.cpp; do
    src=${src##*/lesson}
    src=${src%.cpp}
    [[ $src =~ ^[0-9]+$ ]] && echo "$src"
  done | sort -n
}

# lesson_scenarios DIR: every scenario of the lesson in DIR, one a line:
# run.conf's scenarios= (lessonN's), then each scenarios_PROGRAM= (a second
# program's), as listed. Prints nothing for a lesson without scenarios.
lesson_scenarios() {
  sed -n 's/^scenarios\(_lesson[0-9]*_[a-z0-9_]*\)\{0,1\}=//p' "$1/run.conf" | xargs -r printf '%s\n'
}

# scenario_program DIR N SCENARIO: the program that plays SCENARIO of lesson
# N in DIR: lessonN when run.conf's scenarios= lists it, lessonN_NAME when
# scenarios_lessonN_NAME= does; fails, printing nothing, when none does.
scenario_program() {
  local key value words word
  while IFS='=' read -r key value; do
    [[ $key == scenarios || $key == scenarios_lesson"$2"_* ]] || continue
    read -ra words <<<"$value"
    for word in "${words[@]}"; do
      [[ $word == "$3" ]] || continue
      if [[ $key == scenarios ]]; then echo "lesson$2"; else echo "${key#scenarios_}"; fi
      return 0
    done
  done <"$1/run.conf"
  return 1
}

# run_text DIR KEY: KEY's value in DIR/run.conf, as written.
run_text() {
  sed -n "s/^$2=//p" "$1/run.conf"
}

# run_words DIR KEY [SERVER]: KEY's value split into words, one a line, with
# {server} replaced by SERVER. Prints nothing for a missing or empty key.
run_words() {
  local word
  run_text "$1" "$2" | xargs -r printf '%s\n' |
    while IFS= read -r word; do printf '%s\n' "${word//\{server\}/${3:-}}"; done
}

# lesson_unmet DIR DEV: why device DEV cannot run the lesson in DIR (its
# run.conf's needs=), as one sentence naming the kernel it needs; nothing
# when DEV has all it needs. The device is asked through the prefix
# LESSON_RX (scripts/exercises/grade_run.sh: the lab's exec), or here.
lesson_unmet() {
  local need kernel
  local -a rx=("${LESSON_RX[@]}")
  kernel=$(run_text "$1" lab_kernel)
  for need in $(run_text "$1" needs); do
    case $need in
      odp)
        # ibv_devinfo -v lists general_odp_caps, then ODP_SUPPORT or NO SUPPORT.
        "${rx[@]}" ibv_devinfo -v -d "$2" 2>/dev/null | grep -A1 'general_odp_caps:' | grep -q ODP_SUPPORT ||
          echo "needs on-demand paging, which $2 lacks on Linux $("${rx[@]}" uname -r) (rxe has it from 6.15): run it with LAB_KERNEL=${kernel:-trixie-backports}"
        ;;
    esac
  done
}
