# shellcheck shell=bash
# lab/cmd_fetch.sh: `lab.sh fetch` (part of scripts/lab.sh; sourced, never
# run).

# Prepare the kernel, initramfs and accelerator (run, shell and pair do it
# on demand) and say what the lab will use.
cmd_fetch() {
  [[ $# -eq 0 ]] || misuse "fetch takes no arguments"
  check_host
  local lab kernel initramfs accel args
  lab=$(prepare_lab)
  { read -r kernel && read -r initramfs && read -r accel; } <<<"$lab"
  mapfile -d '' -t args < <(accel_args "$accel")
  echo "lab.sh: kernel $kernel"
  echo "lab.sh: initramfs $initramfs"
  echo "lab.sh: accelerator ${args[*]}"
}
