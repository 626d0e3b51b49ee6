#!/usr/bin/env bats
# tests/shell_style.bats: every shell file of the workbook keeps one house
# style: formatted by `shfmt -i 2 -ci`, and shellcheck-clean.
#
# A failure names each file and its finding. To fix:
#   `shfmt -i 2 -ci -w FILE`   (rewrites FILE in the house style)
#   `shellcheck -x FILE`       (from the checkout's top; explains each finding)
# Both come from Debian (packages shfmt and shellcheck, which
# scripts/install_deps.sh installs).

bats_require_minimum_version 1.5.0

setup() {
  bats_load_library bats-support
  bats_load_library bats-assert
  # The paths in shellcheck's `source=` directives are from the checkout's top.
  cd "$BATS_TEST_DIRNAME/.." || fail "no checkout at $BATS_TEST_DIRNAME/.."
}

# is_shell FILE: a .sh, .bash or .bats file, or one whose #! line runs sh or
# bash. (shfmt reads a .bats file as Bats, @test blocks and all; shellcheck
# knows it by its #!/usr/bin/env bats.)
is_shell() {
  local first=
  [[ $1 == *.sh || $1 == *.bash || $1 == *.bats ]] && return 0
  read -r first <"$1" || true
  [[ $first =~ ^#!.*[/\ ](ba)?sh([[:space:]]|$) ]]
}

# shell_files: the shell files in git (tracked, or new and not ignored)
# under scripts/, .ci/run, tests/run.sh, the test helpers, a lesson's own
# scripts (lessons/18_netns/netns_pair.sh), the exercises' graders and every
# Bats file wherever it is, one a line.
shell_files() {
  local file
  git ls-files --cached --others --exclude-standard -- \
    'scripts/*' .ci/run tests/run.sh 'tests/helpers/*.bash' 'tests/helpers/*.sh' 'tests/helpers/stubs/*' 'tests/helpers/doctor_stubs/*' 'lessons/*/*.sh' 'lessons/*/exercises/*/grade.bash' '*.bats' |
    while read -r file; do
      [[ -f $file ]] && is_shell "$file" && echo "$file"
    done
}

@test "the style check covers the scripts, the CI entry point, the test runner, the helpers, the graders and the Bats files" {
  run -0 shell_files
  assert_line scripts/lab.sh
  assert_line scripts/lab_guest.sh
  assert_line scripts/setup_rxe.sh
  assert_line .ci/run
  assert_line tests/run.sh
  assert_line tests/helpers/stubs.bash
  assert_line tests/helpers/stubs/rdma
  assert_line tests/helpers/doctor_breakages.sh
  assert_line tests/helpers/doctor_stubs/rping
  assert_line scripts/exercises/grade.sh
  assert_line lessons/01_device_query/exercises/1.1/grade.bash
  assert_line lessons/18_netns/netns_pair.sh
  assert_line tests/shell_style.bats
  assert_line tests/lab.bats
  assert_line tests/setup_rxe.bats
  assert_line tests/lesson4_send_recv.bats
  refute_line tests/helpers/fake_peer.py
}

@test "every shell file is formatted as shfmt -i 2 -ci formats it" {
  local files
  mapfile -t files < <(shell_files)
  # On a finding: a diff per file, headed by the file's name.
  run shfmt -i 2 -ci -d "${files[@]}"
  assert_output ""
  assert_success
}

@test "shellcheck finds nothing in any shell file" {
  local files
  mapfile -t files < <(shell_files)
  # On a finding: FILE:LINE:COLUMN: severity: what [SCnnnn], one a line.
  run shellcheck -x -f gcc "${files[@]}"
  assert_output ""
  assert_success
}
