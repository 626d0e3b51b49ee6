# Grader of exercise 2.1: the 16 access combinations, each verdict as the rule says and as the kernel said.
# shellcheck disable=SC2034 # HINT is read by scripts/exercises/grade_lib.bash
HINT="loop combo = 0..15, OR in kFlags[i].bit for each bit i of combo, call ibv_reg_mr without CHECK_PTR, print 'registered' or 'refused' with wb::errno_str(errno)"

# "LOCAL_WRITE|REMOTE_READ" for combination 5, as access_str() writes it; "0" for none.
access_name() {
  local combo=$1 names=(LOCAL_WRITE REMOTE_WRITE REMOTE_READ REMOTE_ATOMIC) s="" i
  for i in 0 1 2 3; do
    ((combo & (1 << i))) && s+="${s:+|}${names[i]}"
  done
  echo "${s:-0}"
}

grade() {
  command -v strace >/dev/null || {
    ex_fail "strace installed (apt-get install strace): the grader checks your verdicts against the kernel's with it" \
      "no strace on this machine"
    return
  }
  local trace=$EX_TMP/trace
  ex_run strace -f -y -o "$trace" -e trace=ioctl,write "$1" -d "$EX_DEV"
  ((EX_STATUS == 0)) || {
    ex_fail "exit status 0" "exit status $EX_STATUS: $(ex_tail "$EX_OUT")"
    return
  }
  local combo name want line wrong=() printed=0
  for ((combo = 0; combo < 16; combo++)); do
    name=$(access_name "$combo")
    want=registered
    # REMOTE_WRITE (bit 1) or REMOTE_ATOMIC (bit 3) without LOCAL_WRITE (bit 0).
    ((combo & 10 && !(combo & 1))) && want="refused EINVAL"
    line=$(grep -m1 "^access $name: " "$EX_OUT") || {
      wrong+=("$name: no line")
      continue
    }
    printed=$((printed + 1))
    [[ ${line#"access $name: "} == "$want"* ]] || wrong+=("$name: ${line#"access $name: "}")
  done
  ((printed > 0)) || {
    ex_fail "16 lines 'access FLAGS: registered, ...' or 'access FLAGS: refused ERRNO'" "none: $(ex_tail "$EX_OUT")"
    return
  }
  ((${#wrong[@]} == 0)) || {
    ex_fail "the 6 combinations with REMOTE_WRITE or REMOTE_ATOMIC but no LOCAL_WRITE refused EINVAL, the 10 others registered" \
      "$(printf '%s; ' "${wrong[@]}")"
    return
  }
  # The kernel's answers: each ibv_reg_mr is one ioctl (or write) on the uverbs device.
  local kernel_refused
  kernel_refused=$(grep -c 'uverbs[0-9]*>.*= -1 EINVAL' "$trace")
  ((kernel_refused == 6)) || {
    ex_fail "the kernel refusing 6 registrations with EINVAL, as the output says" \
      "strace saw $kernel_refused calls on /dev/infiniband/uverbs* fail with EINVAL"
    return
  }
}
