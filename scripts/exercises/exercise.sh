#!/usr/bin/env bash
# exercise.sh - make, reset, save and check the exercises' files, each from its one source.
#
#   scripts/exercises/exercise.sh files [N.M...]      make each learner's file that is missing (never overwrites one)
#   scripts/exercises/exercise.sh reset N.M [--solution]   start N.M over (your file is kept as exN_M.cpp~);
#                                                     --solution: put the reference solution in your file instead
#   scripts/exercises/exercise.sh save N.M [--solution]    maintainers: store your edited file back as N.M's starter,
#                                                     the solution merged onto it (--solution: as its solution)
#   scripts/exercises/exercise.sh refresh [N.M...]    maintainers: after a lesson changed, carry every patch over
#                                                     to today's lesson (a three-way merge) and store it again
#   scripts/exercises/exercise.sh check [N.M...]      every patch applies exactly (no fuzz) to today's lesson and
#                                                     starter; names each exercise whose patch does not
#   scripts/exercises/exercise.sh source N.M starter|solution OUT   write the pristine text to OUT (make's rules)
#   scripts/exercises/exercise.sh list                the exercises, "N.M<TAB>folder", in lesson order
#
# Where an exercise's code lives (docs/contributing.md says why):
# - lessons/NN_topic/exercises/N.M/starter.patch: the starter as lesson
#   NN's lessonN.cpp with a few changes; or N.M/starter.cpp: a starter that
#   is a program of its own.
# - lessons/NN_topic/exercises/solutions/exN_M.patch: the solution as the
#   starter with its TODOs done.
# - lessons/NN_topic/exercises/N.M/exN_M.cpp: the learner's file, made from
#   the starter once (make, make grade) and ignored by git: nothing here
#   overwrites it but `reset`.
# A patch applies with `git apply` (exact context, no fuzz; git is all it needs).
# Each patch names the blob of the file it was made against (base:), so that
# `refresh` can merge a lesson's later changes into the exercise.
#
# Exit status: 0 done, 1 a patch that does not apply or a merge with conflicts, 2 misuse.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; }
misuse() {
  echo "exercise: $*" >&2
  exit 2
}

# Every exercise folder, in lesson order: "N.M<TAB>folder".
list() {
  local d
  for d in lessons/[0-9][0-9]_*/exercises/[0-9]*.[0-9]*/; do
    d=${d%/} && [[ -f $d/grade.bash ]] && printf '%s\t%s\n' "${d##*/}" "$d"
  done | sort -t. -k1,1n -k2,2n
}

# folder N.M: the exercise's folder; misuse if there is none.
folder() {
  local row
  [[ $1 =~ ^[0-9]+\.[0-9]+$ ]] || misuse "EX must look like 4.2, not '$1'"
  while IFS=$'\t' read -r id dir; do
    [[ $id == "$1" ]] && {
      echo "$dir"
      return 0
    }
  done < <(list)
  row=$(list | cut -f1 | tr '\n' ' ')
  misuse "there is no exercise $1; there are: $row"
}

name_of() { echo "ex${1/./_}"; }
# lesson_of DIR: the lesson program DIR's starter.patch is made from: the one
# its base: line names (12.2: lessons/12_ud_multicast/lesson12_mcast.cpp, a
# lesson's second program), else the lesson's lessonN.cpp.
lesson_of() {
  local base
  base=$(sed -n '2s/^base: \(lessons\/[^ ]*\.cpp\) blob [0-9a-f]*$/\1/p' "$1/starter.patch" 2>/dev/null)
  if [[ -n $base && -f $base && $base == "${1%/exercises/*}"/* ]]; then
    echo "$base"
  else
    compgen -G "${1%/exercises/*}/lesson*.cpp" | grep -E '/lesson[0-9]+\.cpp$'
  fi
}
solution_patch_of() { echo "$(dirname "$1")/solutions/$(name_of "$(basename "$1")").patch"; }

# A folder of our own, outside any git checkout (git apply in a checkout's
# subfolder would skip the paths outside it).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GIT_CEILING_DIRECTORIES=$work

# apply BASE PATCH OUT: OUT is BASE with PATCH applied exactly (git apply: the
# context must match, at most shifted; never fuzzed). Status 1 with git's
# words on stderr when it does not apply.
apply() {
  local base=$1 patch=$2 out=$3 d
  d=$(mktemp -d -p "$work")
  cp "$base" "$d/file.cpp"
  git -C "$d" apply --whitespace=nowarn -p1 --include=file.cpp - <"$patch" 2>"$d/err" || {
    sed 's/^/  /' "$d/err" >&2
    rm -rf "$d"
    return 1
  }
  mv "$d/file.cpp" "$out"
  rm -rf "$d"
}

# make_patch BASE NEW OUT TITLE BASENAME: OUT is the diff from BASE to NEW,
# headed by TITLE and the blob of BASE (written to git's objects, for refresh).
make_patch() {
  local base=$1 new=$2 out=$3 title=$4 based_on=$5 blob
  blob=$(git hash-object -w "$base" 2>/dev/null || git hash-object "$base")
  {
    echo "$title"
    echo "base: $based_on blob $blob"
    diff -u --label a/file.cpp --label b/file.cpp "$base" "$new"
  } >"$out.new"
  (($? <= 1)) || {
    rm -f "$out.new"
    return 1
  }
  mv "$out.new" "$out"
}

# starter_text DIR OUT: the pristine starter of the exercise in DIR.
starter_text() {
  local dir=$1 out=$2
  if [[ -f $dir/starter.cpp ]]; then
    cp "$dir/starter.cpp" "$out"
  elif [[ -f $dir/starter.patch ]]; then
    apply "$(lesson_of "$dir")" "$dir/starter.patch" "$out"
  else
    echo "exercise $(basename "$dir"): neither $dir/starter.cpp nor $dir/starter.patch" >&2
    return 1
  fi
}

# old_starter_text DIR OUT: the starter as its patch was made: against
# today's lesson when it still applies, else against the lesson it names
# (base:), which git still has. What save and refresh start from.
old_starter_text() {
  local dir=$1 out=$2
  starter_text "$dir" "$out" 2>/dev/null && return 0
  [[ -f $dir/starter.patch ]] && old_base "$dir/starter.patch" "$work/base-lesson.cpp" &&
    apply "$work/base-lesson.cpp" "$dir/starter.patch" "$out"
}

# solution_text DIR OUT: the reference solution, the pristine starter with its patch.
solution_text() {
  local dir=$1 out=$2
  starter_text "$dir" "$work/starter.cpp" || return 1
  apply "$work/starter.cpp" "$(solution_patch_of "$dir")" "$out"
}

cmd_source() {
  local dir kind=$2 out=$3
  dir=$(folder "$1") || exit 2
  mkdir -p "$(dirname "$out")"
  case $kind in
    starter) starter_text "$dir" "$out.tmp" ;;
    solution) solution_text "$dir" "$out.tmp" ;;
    *) misuse "source takes starter or solution, not '$kind'" ;;
  esac || {
    rm -f "$out.tmp"
    echo "exercise $1: its $kind could not be made (scripts/exercises/exercise.sh check $1 says why)" >&2
    return 1
  }
  mv "$out.tmp" "$out"
}

# ids ARGS...: the exercises named, or every one.
ids() {
  if (($#)); then
    local id
    for id in "$@"; do
      folder "$id" >/dev/null || return
      echo "$id"
    done
  else
    list | cut -f1
  fi
}

cmd_files() {
  local id dir file status=0
  ids "$@" >/dev/null || exit 2
  for id in $(ids "$@"); do
    dir=$(folder "$id") || exit 2
    file=$dir/$(name_of "$id").cpp
    [[ -e $file ]] && continue
    if starter_text "$dir" "$work/new.cpp"; then
      mv "$work/new.cpp" "$file"
      echo "exercise $id: made your file $file from $(source_of "$dir")"
    else
      status=1
    fi
  done
  return "$status"
}

# source_of DIR: where the starter comes from, in words.
source_of() {
  if [[ -f $1/starter.cpp ]]; then echo "$1/starter.cpp"; else echo "$(lesson_of "$1") and $1/starter.patch"; fi
}

cmd_reset() {
  local id=${1:-} kind=starter dir file
  [[ -n $id ]] || misuse "reset takes an exercise: scripts/exercises/exercise.sh reset 4.2 (make exercise-reset EX=4.2)"
  [[ ${2:-} == --solution ]] && kind=solution
  dir=$(folder "$id") || exit 2
  file=$dir/$(name_of "$id").cpp
  "${kind}_text" "$dir" "$work/new.cpp" || return 1
  if [[ -e $file ]] && ! cmp -s "$file" "$work/new.cpp"; then
    cp "$file" "$file~"
    echo "exercise $id: your old file is kept as $file~"
  fi
  mv "$work/new.cpp" "$file"
  echo "exercise $id: $file is the $kind again"
}

# rebase OURS BASE THEIRS OUT LABEL: OUT is OURS with the change from BASE to
# THEIRS merged in (git merge-file). Status 1 on conflicts (marked in OUT).
rebase() {
  local ours=$1 base=$2 theirs=$3 out=$4 label=$5
  cp "$ours" "$out"
  cmp -s "$base" "$theirs" && return 0
  git merge-file -L "$label" -L "before" -L "now" "$out" "$base" "$theirs" >/dev/null 2>&1
}

# store_starter DIR NEW: store NEW as the starter of DIR (a patch against the
# lesson, or the standalone file), and carry the solution's patch over to it.
store_starter() {
  local dir=$1 new=$2 old=${3:-} id name lesson
  id=$(basename "$dir") name=$(name_of "$(basename "$dir")") lesson=$(lesson_of "$dir")
  if [[ -z $old ]]; then
    old=$work/old-starter.cpp
    old_starter_text "$dir" "$old" || return 1
  fi
  apply "$old" "$(solution_patch_of "$dir")" "$work/old-solution.cpp" || return 1
  local solution_ok=1
  rebase "$work/old-solution.cpp" "$old" "$new" "$work/new-solution.cpp" "solution $id" || solution_ok=
  if [[ -f $dir/starter.cpp ]]; then
    cp "$new" "$dir/starter.cpp"
  else
    make_patch "$lesson" "$new" "$dir/starter.patch" \
      "exercise $id's starter: $(basename "$lesson") with these changes (scripts/exercises/exercise.sh; edit $dir/$name.cpp, then make exercise-save EX=$id)" \
      "$lesson" || return 1
  fi
  if [[ -z $solution_ok ]]; then
    cp "$work/new-solution.cpp" "$dir/$name.cpp.solution-conflict"
    echo "exercise $id: the starter is stored, but the solution does not follow it without conflicts:" >&2
    echo "  resolve $dir/$name.cpp.solution-conflict, move it to $dir/$name.cpp, then make exercise-save EX=$id SOLUTIONS=1" >&2
    return 1
  fi
  store_solution "$dir" "$work/new-solution.cpp"
}

# store_solution DIR NEW: store NEW as the solution of DIR, a patch against its starter.
store_solution() {
  local dir=$1 new=$2 id name
  id=$(basename "$dir") name=$(name_of "$(basename "$dir")")
  starter_text "$dir" "$work/starter.cpp" || return 1
  make_patch "$work/starter.cpp" "$new" "$(solution_patch_of "$dir")" \
    "SPOILER: exercise $id's reference solution: its starter with these changes (make exercise-reset EX=$id SOLUTIONS=1 puts it in $dir/$name.cpp)" \
    "the starter of $id"
}

cmd_save() {
  local id=${1:-} dir file
  [[ -n $id ]] || misuse "save takes an exercise: scripts/exercises/exercise.sh save 4.2 (make exercise-save EX=4.2)"
  dir=$(folder "$id") || exit 2
  file=$dir/$(name_of "$id").cpp
  [[ -f $file ]] || misuse "there is no $file to save (make exercise-reset EX=$id makes it)"
  if [[ ${2:-} == --solution ]]; then
    store_solution "$dir" "$file" && echo "exercise $id: $file stored as $(solution_patch_of "$dir")"
  else
    store_starter "$dir" "$file" && echo "exercise $id: $file stored as the starter ($(source_of "$dir")); the solution follows it"
  fi
}

# The lesson as it was when PATCH was made: its base blob, when git still has it.
old_base() {
  local blob
  blob=$(sed -n '2s/^base: .* blob \([0-9a-f]*\)$/\1/p' "$1")
  [[ -n $blob ]] && git cat-file blob "$blob" >"$2" 2>/dev/null
}

cmd_refresh() {
  local id dir lesson status=0
  ids "$@" >/dev/null || exit 2
  for id in $(ids "$@"); do
    dir=$(folder "$id") || exit 2
    lesson=$(lesson_of "$dir")
    rm -f "$work/old-starter.cpp"
    if [[ -f $dir/starter.patch ]]; then
      # The starter as it was made (against the lesson of then), with the
      # lesson's changes since merged in.
      if old_base "$dir/starter.patch" "$work/old-lesson.cpp" &&
        apply "$work/old-lesson.cpp" "$dir/starter.patch" "$work/old-starter.cpp" 2>/dev/null; then
        if ! rebase "$work/old-starter.cpp" "$work/old-lesson.cpp" "$lesson" "$work/new-starter.cpp" "starter $id"; then
          cp "$work/new-starter.cpp" "$dir/$(name_of "$id").cpp.conflict"
          echo "exercise $id: lesson $lesson changed where the starter changes it; resolve $dir/$(name_of "$id").cpp.conflict, move it to $dir/$(name_of "$id").cpp, then make exercise-save EX=$id" >&2
          status=1
          continue
        fi
      elif ! apply "$lesson" "$dir/starter.patch" "$work/new-starter.cpp"; then
        echo "exercise $id: the starter's patch does not apply to $lesson, and git no longer has the lesson it was made against" >&2
        status=1
        continue
      fi
      if [[ -f $work/old-starter.cpp ]]; then
        store_starter "$dir" "$work/new-starter.cpp" "$work/old-starter.cpp" || status=1
      else
        store_starter "$dir" "$work/new-starter.cpp" || status=1
      fi
      rm -f "$work/old-starter.cpp"
    else
      # A starter of its own: the lesson is not its base; the solution's patch is made again.
      { solution_text "$dir" "$work/new-solution.cpp" && store_solution "$dir" "$work/new-solution.cpp"; } || status=1
    fi
  done
  return "$status"
}

cmd_check() {
  local id dir lesson bad=()
  ids "$@" >/dev/null || exit 2
  for id in $(ids "$@"); do
    dir=$(folder "$id") || exit 2
    lesson=$(lesson_of "$dir")
    if [[ -f $dir/starter.patch ]] && ! apply "$lesson" "$dir/starter.patch" "$work/s.cpp" 2>"$work/err"; then
      echo "exercise $id: its starter patch $dir/starter.patch no longer applies to $lesson:"
      cat "$work/err"
      bad+=("$id")
      continue
    fi
    if ! starter_text "$dir" "$work/s.cpp" 2>"$work/err"; then
      echo "exercise $id: no starter:"
      cat "$work/err"
      bad+=("$id")
      continue
    fi
    if ! apply "$work/s.cpp" "$(solution_patch_of "$dir")" "$work/sol.cpp" 2>"$work/err"; then
      echo "exercise $id: its solution patch $(solution_patch_of "$dir") no longer applies to its starter:"
      cat "$work/err"
      bad+=("$id")
    fi
  done
  if ((${#bad[@]})); then
    echo "exercise: ${#bad[@]} exercise(s) whose patch does not apply: ${bad[*]} (a lesson edit inside their change; make exercise-refresh merges it in, or says where it conflicts)"
    return 1
  fi
}

case ${1:-} in
  -h | --help | "") usage ;;
  list) list ;;
  files | reset | save | refresh | check | source)
    c=$1
    shift
    "cmd_$c" "$@"
    ;;
  *) misuse "unknown command '$1' (see scripts/exercises/exercise.sh -h)" ;;
esac
