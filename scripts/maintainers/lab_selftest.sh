#!/usr/bin/env bash
# lab_selftest.sh - rdma-core's own test suite (Debian's python3-pyverbs)
# against rxe0 in the Soft-RoCE lab, on the kernel LAB_KERNEL names.
#
#   make lab-selftest                       the default kernel (bookworm here)
#   LAB_KERNEL=trixie make lab-selftest     another (scripts/lab.sh -h)
#   scripts/maintainers/lab_selftest.sh [-k PATTERN]    only the tests whose name matches
#
# Runs /usr/share/doc/rdma-core/tests (its .py.gz files unpacked into a
# temporary folder in the guest) as `run_tests.py --dev rxe0 --gid 1 -v`
# does (its three lines, with a result that reports each test's outcome),
# then prints a summary: passed, failed, skipped by reason. A failure
# listed for this kernel in scripts/maintainers/lab_selftest_expected.txt, with its
# reason, is expected; any other failure, an expected failure that now
# passes, or a test skipped for a reason that is the lab's own fails it.
# The whole log is kept in selftest-KERNEL.log (in $TMPDIR).
#
# Exit status: 0 as expected, 1 not, 2 misuse, else the lab's.
set -euo pipefail
cd "$(dirname "$0")/../.."

readonly TESTS=/usr/share/doc/rdma-core/tests

# In the guest: unpack the tests into /tmp (a tmpfs there), run them.
if [[ ${1:-} == --in-guest ]]; then
  shift
  work=$(mktemp -d /tmp/rdma-core-tests.XXXXXX)
  cp -r "$TESTS" "$work/tests"
  gunzip -f "$work"/tests/*.py.gz
  # rxe0 is a virtual device on every kernel the lab boots (rxe sets no
  # parent device), so /sys/class/infiniband/rxe0/device/net, where the
  # suite looks for the netdev, does not exist and it would skip every
  # rdma_cm test ("doesn't have net interface"). The kernel names each
  # GID's netdev in gid_attrs/ndevs: read it there.
  cat >>"$work/tests/base.py" <<'PY'


# Added by the workbook's lab (scripts/maintainers/lab_selftest.sh): the GID's netdev
# from sysfs gid_attrs, since a software device such as rxe has no
# /sys/class/infiniband/DEV/device/net.
def _lab_get_ip_mac(self, dev, port, idx):
    path = '/sys/class/infiniband/{}/ports/{}/gid_attrs/ndevs/{}'.format(dev, port, idx)
    try:
        with open(path) as f:
            net_name = f.read().strip()
        ip_addr, mac_addr = self.get_ip_mac_address(net_name)
    except (OSError, KeyError, IndexError, subprocess.CalledProcessError):
        self.args.append([dev, port, idx, None, None])
    else:
        self.args.append([dev, port, idx, ip_addr, mac_addr])


RDMATestCase._get_ip_mac = _lab_get_ip_mac
PY
  # run_tests.py's own three lines, with a result that also prints each
  # test's outcome as one line the host parses (LAB_SELFTEST_RESULT JSON).
  cat >"$work/tests/lab_run_tests.py" <<'PY'
import json, os, sys, unittest
from importlib.machinery import SourceFileLoader
from args_parser import parser


def say(test, outcome, detail=''):
    print('LAB_SELFTEST_RESULT ' + json.dumps([test.id(), outcome, detail]), flush=True)


def last_line(err):
    text = str(err[1]).strip().splitlines()
    return '{}: {}'.format(err[0].__name__, text[-1] if text else '')[:300]


class Result(unittest.TextTestResult):
    def addSuccess(self, test):
        super().addSuccess(test)
        say(test, 'passed')

    def addFailure(self, test, err):
        super().addFailure(test, err)
        say(test, 'failed', last_line(err))

    def addError(self, test, err):
        super().addError(test, err)
        say(test, 'error', last_line(err))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        say(test, 'skipped', reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        say(test, 'expected failure', last_line(err))

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        say(test, 'unexpected success')

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            say(subtest, 'failed', last_line(err))


module_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), '__init__.py')
tests = SourceFileLoader('tests', module_path).load_module()
parser.parse_args()
unittest.main(module=tests, testRunner=unittest.TextTestRunner(resultclass=Result, verbosity=2))
PY
  cd "$work/tests"
  echo "selftest: kernel $(uname -r), rdma-core's tests from python3-pyverbs $(dpkg-query -W -f='${Version}' python3-pyverbs)"
  # The huge-page tests (ODP's among them) need 2 MB pages reserved: 64
  # of them (128 MB of the guest's 1 GB), given back after.
  hugepages=/proc/sys/vm/nr_hugepages
  read -r pages_before <"$hugepages"
  echo 64 >"$hugepages" || true
  status=0
  /usr/bin/python3 lab_run_tests.py --dev rxe0 --gid 1 -v "$@" 2>&1 || status=$?
  echo "$pages_before" >"$hugepages" || true
  exit "$status"
fi

pattern=()
case ${1:-} in
  -k)
    [[ -n ${2:-} ]] || {
      echo "lab_selftest.sh: -k needs a pattern" >&2
      exit 2
    }
    pattern=(-k "$2")
    ;;
  -h | --help)
    sed -n '2,17s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
  "") ;;
  *)
    echo "lab_selftest.sh: unknown argument '$1' (see -h)" >&2
    exit 2
    ;;
esac
[[ -d $TESTS ]] || {
  echo "lab_selftest.sh: $TESTS not found: run scripts/install_deps.sh (package python3-pyverbs)" >&2
  exit 1
}

kernel=${LAB_KERNEL:-$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release)}
log=${TMPDIR:-/tmp}/selftest-$kernel.log
echo "lab-selftest: rdma-core's tests on rxe0 in the lab, kernel $kernel (log: $log)"
status=0
scripts/lab.sh exec --up --timeout 3000 -- scripts/maintainers/lab_selftest.sh --in-guest "${pattern[@]}" >"$log" 2>&1 || status=$?
# unittest exits 1 when a test failed: the summary judges that. Anything
# else is the lab's failure (or a crash of the suite): show the log's end.
if [[ $status -ne 0 && $status -ne 1 ]]; then
  tail -n 30 "$log" >&2
  echo "lab-selftest: the lab or the suite failed (exit $status)" >&2
  exit "$status"
fi
exec /usr/bin/python3 -I scripts/maintainers/lab_selftest_summary.py "$kernel" "$log" scripts/maintainers/lab_selftest_expected.txt
