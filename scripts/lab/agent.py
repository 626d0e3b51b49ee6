#!/usr/bin/python3 -I -S
"""lab/agent.py: the host side of a lab that stays up (part of scripts/lab.sh).

`lab.sh up` starts this program as a small supervisor: it starts qemu (its
child), talks to qemu's own guest agent (qemu-ga, from Debian's
qemu-guest-agent, running in the guest) over a virtio-serial port, and
listens on a Unix socket for `lab.sh exec`, `status` and `down`. Why the
guest agent: it is qemu's own, packaged and maintained channel into a guest
(guest-exec, guest-file-read), it needs no network in the guest and no
vhost-vsock on the host, and it runs from the host's root like everything
else in the lab.

  agent.py up STATE            start the supervisor from STATE/qemu.args;
                               return once the guest answers (exit 0) or
                               say why it failed (exit 125)
  agent.py exec STATE SECS CWD -- CMD [ARGS...]
                               run CMD in the guest; stdout and stderr kept
                               apart; exit with its status; 124 after SECS
  agent.py status STATE        one line; exit 0 if up, 3 if not
  agent.py down STATE          stop the guest; exit 0 (also when none is up)

Guest-agent requests go one at a time (qemu-ga reads one request after
another on one port), so the supervisor holds the only connection and
serialises them; many `exec`s run at once, each polling its own command's
output files. A command's stdout and stderr go to files in the guest's
/run that the guest agent reads as they grow (guest-exec's own capture
returns output only at the end, and a test must see a server's first line
while it runs).
"""

import base64
import json
import os
import select
import signal
import socket
import sys
import time

# asyncio is the supervisor's alone, imported by cmd_up when it starts one:
# it was half of every `exec` client's host CPU (10 execs of true: 0.72 s
# with it, 0.36 s without, 2026-12-02), and the suites make over a thousand.
asyncio = None

EXIT_LAB_FAILED = 125
EXIT_TIMEOUT = 124
EXIT_NOT_UP = 3
# Seconds a guest-agent request may take before the guest counts as hung.
REQUEST_LIMIT = 20
# The longest line either socket may carry: a command line of some MiB, or
# a guest-file-read answer (64 KiB of output, base64).
LINE_LIMIT = 64 * 1024 * 1024
# Seconds `up` waits for the guest agent's first answer (boot + rxe setup).
BOOT_LIMIT = 180


def say(*words):
    print("lab.sh:", *words, file=sys.stderr, flush=True)


def console_tail(state, lines=25):
    try:
        with open(os.path.join(state, "console.log"), "rb") as f:
            text = f.read().decode("utf-8", "replace").replace("\r", "")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# ---------------------------------------------------------------- supervisor

class GuestGone(Exception):
    """The guest agent stopped answering, or qemu ended."""


class Agent:
    """The one connection to qemu-ga, one request at a time."""

    def __init__(self, path):
        self.path = path
        self.lock = asyncio.Lock()
        self.reader = self.writer = None
        self.sync_id = int(time.time()) % 100000 * 1000

    async def connect(self):
        self.reader, self.writer = await asyncio.open_unix_connection(self.path, limit=LINE_LIMIT)

    async def sync(self, limit):
        # guest-sync-delimited: qemu-ga answers 0xFF then {"return": id};
        # anything before it is a stale answer from an earlier client.
        self.sync_id += 1
        self.writer.write(b"\xff" + json.dumps(
            {"execute": "guest-sync-delimited",
             "arguments": {"id": self.sync_id}}).encode() + b"\n")
        await self.writer.drain()
        deadline = time.monotonic() + limit
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise asyncio.TimeoutError
            line = await asyncio.wait_for(self.reader.readline(), left)
            if not line:
                raise GuestGone("the guest agent closed its port")
            line = line.lstrip(b"\xff").strip()
            if not line:
                continue
            try:
                if json.loads(line).get("return") == self.sync_id:
                    return
            except ValueError:
                continue

    async def call(self, command, **arguments):
        async with self.lock:
            msg = {"execute": command}
            if arguments:
                msg["arguments"] = arguments
            try:
                self.writer.write(json.dumps(msg).encode() + b"\n")
                await self.writer.drain()
                line = b""
                while not line.strip():
                    line = await asyncio.wait_for(self.reader.readline(), REQUEST_LIMIT)
                    if not line:
                        raise GuestGone("the guest agent closed its port")
            except (asyncio.TimeoutError, ConnectionError) as e:
                raise GuestGone(f"the guest agent did not answer {command} ({e!r})")
            answer = json.loads(line)
            if "error" in answer:
                raise RuntimeError(f"{command}: {answer['error'].get('desc', answer['error'])}")
            return answer.get("return")


# The guest side of one exec, in static busybox (a dynamically linked
# shell and coreutils' timeout cost 200 ms more per command under TCG):
# stdout and stderr appended to two files the supervisor already holds open,
# the names removed at once (nothing is left behind), then busybox setsid
# makes the command lead a session and process group of its own, so that a
# kill of the group (at --timeout, or when the client is killed) reaches
# its children too. The command keeps the PID guest-exec reported. Busybox
# runs its own applet for a bare name it knows: the client hands it a path
# (host_path).
BUSYBOX = "/bin/busybox"
WRAPPER = ('exec </dev/null >>"$1" 2>>"$2"; rm -f "$1" "$2"; '
           'cd "$3" || exit 125; shift 3; exec ' + BUSYBOX + ' setsid "$@"')
# The longest pause between two polls of a command's output and status:
# FAST_POLL, and SLOW_POLL once it has printed nothing for QUIET seconds.
# Measured on lessons 4 and 7's suites: the guest's CPU 17% less than with
# 0.1 s throughout, the same wall time.
FAST_POLL = 0.1
SLOW_POLL = 0.3
QUIET = 2
# Seconds between the TERM a timed-out command gets and the KILL.
KILL_AFTER = 3
# Bytes a guest-file-read asks for; how many reads of each stream one poll
# makes (1 MiB: more than lesson 11's busiest output, far less than `yes`);
# and once a command was killed at --timeout, how many more are sent on.
READ_SIZE = 65536
READS_PER_POLL = 16
READS_AFTER_TIMEOUT = 16


class Supervisor:
    def __init__(self, state, idle):
        self.state = state
        self.idle = idle
        self.jobs = 0
        self.last_used = time.monotonic()
        self.started = time.time()
        self.seq = 0
        self.qemu = None
        self.agent = Agent(os.path.join(state, "qga.sock"))
        self.stopping = asyncio.Event()
        self.why = ""

    # -- one exec
    async def run_job(self, req, reader, writer):
        def send(obj):
            writer.write(json.dumps(obj).encode() + b"\n")

        self.seq += 1
        base = f"/run/lab-exec/{os.getpid()}.{self.seq}"
        handles = {}
        pid = None
        try:
            for stream in ("o", "e"):
                handles[stream] = await self.agent.call(
                    "guest-file-open", path=f"{base}.{stream}", mode="w+")
            env = [f"{k}={v}" for k, v in req["env"].items()]
            pid = (await self.agent.call(
                "guest-exec", path=BUSYBOX,
                arg=["sh", "-c", WRAPPER, "sh", f"{base}.o", f"{base}.e",
                     req["cwd"]] + req["argv"],
                env=env, **{"capture-output": False}))["pid"]
            send({"started": pid})
            await writer.drain()
            kill_task = asyncio.ensure_future(self.forward_kills(reader, pid))
            pause = 0.01
            deadline = time.monotonic() + req["timeout"]
            timed_out = False
            heard = time.monotonic()
            while True:
                # At most READS_PER_POLL reads of each stream, then the
                # status, the client and the deadline: a command that
                # prints faster than the guest agent reads cannot hold the
                # loop in here (exec --timeout 3 of `yes` never returned).
                got = await self.drain(handles, send, READS_PER_POLL)
                if got:
                    heard = time.monotonic()
                status = await self.agent.call("guest-exec-status", pid=pid)
                if status.get("exited"):
                    # The rest of its output; a command killed at --timeout
                    # may have printed more than it is worth waiting for.
                    await self.drain(handles, send, READS_AFTER_TIMEOUT if timed_out else None)
                    break
                if kill_task.done():
                    # The client went away: stop its command, as a kill of a
                    # local process would have.
                    await self.kill(pid, "KILL")
                    pid = None
                    return
                if time.monotonic() > deadline:
                    # --timeout: TERM to its process group, KILL if that
                    # did not end it; then it ends 124, as timeout(1) does.
                    await self.kill(pid, "KILL" if timed_out else "TERM")
                    timed_out = True
                    deadline = time.monotonic() + KILL_AFTER
                await writer.drain()
                # Each poll is three guest-agent requests, about 3 ms of
                # the guest's emulated CPU each: 10 polls a second while a
                # command talks or has just started, 3 once it has been
                # silent for QUIET s (a server waiting, a long sleep).
                quiet = time.monotonic() - heard > QUIET
                pause = 0.01 if got else min(pause * 1.5, SLOW_POLL if quiet else FAST_POLL)
                await asyncio.sleep(pause)
            pid = None
            kill_task.cancel()
            if timed_out:
                send({"exit": EXIT_TIMEOUT, "timed_out": True})
            elif "signal" in status:
                send({"exit": 128 + status["signal"]})
            else:
                send({"exit": status.get("exitcode", EXIT_LAB_FAILED)})
        except GuestGone as e:
            self.why = str(e)
            send({"error": f"{e}: the lab guest crashed or hangs; see {self.state}/console.log, "
                  "then scripts/lab.sh down && scripts/lab.sh up", "status": EXIT_LAB_FAILED})
            self.stopping.set()
        except RuntimeError as e:
            send({"error": f"the guest agent refused: {e}", "status": EXIT_LAB_FAILED})
        finally:
            if pid is not None and not self.stopping.is_set():
                try:
                    await self.kill(pid, "KILL")
                except (GuestGone, RuntimeError):
                    pass
            for h in handles.values():
                try:
                    await self.agent.call("guest-file-close", handle=h)
                except (GuestGone, RuntimeError):
                    pass

    async def drain(self, handles, send, reads=None):
        """Send on what each output file holds, or at most READS reads of
        it (READ_SIZE bytes each); True if there was any."""
        got = False
        for stream, h in handles.items():
            n = 0
            while reads is None or n < reads:
                n += 1
                r = await self.agent.call("guest-file-read", handle=h, count=READ_SIZE)
                if not r.get("count"):
                    break
                got = True
                send({stream: r["buf-b64"]})
        return got

    async def kill(self, pid, sig):
        # The guest's `timeout` leads the command's process group.
        await self.agent.call("guest-exec", path=BUSYBOX,
                              arg=["kill", "-s", sig, f"-{pid}"])

    async def forward_kills(self, reader, pid):
        """Ends when the client hangs up; passes its signals on meanwhile."""
        while True:
            line = await reader.readline()
            if not line:
                return
            try:
                sig = json.loads(line).get("kill")
            except ValueError:
                return
            if sig in ("TERM", "INT", "HUP", "KILL", "QUIT", "USR1", "USR2"):
                await self.kill(pid, sig)

    # -- clients
    async def client(self, reader, writer):
        # Only an exec counts as use: asking for the status does not keep a
        # lab up.
        op = None
        try:
            req = json.loads(await reader.readline() or b"{}")
            op = req.get("op")
            if op == "exec":
                self.jobs += 1
                self.last_used = time.monotonic()
                await self.run_job(req, reader, writer)
            elif op == "status":
                writer.write(json.dumps({
                    "pid": os.getpid(), "qemu": self.qemu.pid,
                    "since": self.started, "jobs": self.jobs,
                    "idle": int(time.monotonic() - self.last_used),
                    "idle_limit": self.idle}).encode() + b"\n")
            elif op == "down":
                self.why = "lab.sh down"
                self.stopping.set()
                writer.write(b'{"down": true}\n')
            await writer.drain()
        except (ConnectionError, ValueError, KeyError):
            pass
        finally:
            if op == "exec":
                self.jobs -= 1
                self.last_used = time.monotonic()
            try:
                writer.close()
            except ConnectionError:
                pass

    async def watch_idle(self):
        while not self.stopping.is_set():
            await asyncio.sleep(min(5, max(1, self.idle / 4)))
            if self.jobs == 0 and time.monotonic() - self.last_used > self.idle:
                self.why = f"idle for {self.idle} s"
                self.stopping.set()

    async def watch_qemu(self):
        code = await self.qemu.wait()
        self.why = self.why or f"qemu ended (status {code})"
        self.stopping.set()

    async def main(self, ready_fd):
        with open(os.path.join(self.state, "qemu.args"), "rb") as f:
            args = [a.decode() for a in f.read().split(b"\0") if a]
        log = open(os.path.join(self.state, "qemu.log"), "ab")
        self.qemu = await asyncio.create_subprocess_exec(
            *args, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
            preexec_fn=die_with_parent)
        with open(os.path.join(self.state, "qemu.pid"), "w") as f:
            f.write(f"{self.qemu.pid}\n")
        qemu_watch = asyncio.ensure_future(self.watch_qemu())
        try:
            await self.wait_for_guest()
        except Exception as e:  # report any failure to `up`, then stop
            os.write(ready_fd, f"failed: {e}\n".encode())
            os.close(ready_fd)
            await self.stop(qemu_watch)
            return
        server = await asyncio.start_unix_server(
            self.client, path=os.path.join(self.state, "exec.sock"), limit=LINE_LIMIT)
        os.write(ready_fd, b"ready\n")
        os.close(ready_fd)
        idle_watch = asyncio.ensure_future(self.watch_idle())
        await self.stopping.wait()
        # Why it stops, said before the socket closes: a status asked while
        # qemu is being stopped finds the reason, not "never started".
        self.record_stop()
        server.close()
        idle_watch.cancel()
        await self.stop(qemu_watch)

    async def wait_for_guest(self):
        deadline = time.monotonic() + BOOT_LIMIT
        while True:
            if self.stopping.is_set():
                raise RuntimeError(f"{self.why} before the guest agent answered")
            if "LAB_SETUP_FAILED" in console_tail(self.state, 5):
                reason = [l for l in console_tail(self.state, 50).splitlines()
                          if l.startswith("LAB_SETUP_FAILED")][-1]
                raise RuntimeError(f"guest setup failed: {reason[18:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the guest agent did not answer within {BOOT_LIMIT} s")
            try:
                if self.agent.writer is None:
                    await self.agent.connect()
                await self.agent.sync(1.0)
                return
            except (asyncio.TimeoutError, OSError, GuestGone):
                await asyncio.sleep(0.2)

    def record_stop(self):
        with open(os.path.join(self.state, "stopped"), "w") as f:
            f.write(f"{self.why}\n")

    async def stop(self, qemu_watch):
        if self.qemu.returncode is None:
            self.qemu.terminate()
            try:
                await asyncio.wait_for(self.qemu.wait(), 10)
            except asyncio.TimeoutError:
                self.qemu.kill()
                await self.qemu.wait()
        qemu_watch.cancel()
        self.record_stop()
        forget_supervisor(self.state)
        for name in ("exec.sock", "qemu.pid"):
            try:
                os.unlink(os.path.join(self.state, name))
            except OSError:
                pass


def die_with_parent():
    """In qemu's child before exec: end qemu if the supervisor ends, even
    by SIGKILL (prctl PR_SET_PDEATHSIG), so that no guest is orphaned."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


def cmd_up(state, idle):
    """Start the supervisor in the background; wait for its word."""
    global asyncio
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        out = os.open(os.path.join(state, "agent.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        for fd in range(3, 256):
            if fd != w:
                try:
                    os.close(fd)
                except OSError:
                    pass
        with open(os.path.join(state, "agent.pid"), "w") as f:
            f.write(f"{os.getpid()} {start_time(os.getpid())}\n")
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        import asyncio
        sup = Supervisor(state, idle)
        loop = asyncio.new_event_loop()
        loop.add_signal_handler(signal.SIGTERM, sup.stopping.set)
        loop.run_until_complete(sup.main(w))
        forget_supervisor(state)
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        word = f.readline().strip()
    if word == "ready":
        return 0
    say(word or "the lab's supervisor ended before the guest was up")
    tail = console_tail(state)
    if tail:
        print(f"---- last lines of the guest console ({state}/console.log) ----\n{tail}\n----",
              file=sys.stderr)
    return EXIT_LAB_FAILED


# ------------------------------------------------------------------- clients

def connect(state):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.path.join(state, "exec.sock"))
    return s


def not_up(state):
    """Why there is no lab to talk to: never started, or stopped (and why)."""
    try:
        with open(os.path.join(state, "stopped")) as f:
            why = f.read().strip()
    except OSError:
        return "no lab is up (start one: scripts/lab.sh up)"
    if why.startswith("qemu ended") or why.startswith("the guest agent"):
        tail = console_tail(state, 15)
        return (f"the lab guest died ({why}); scripts/lab.sh up starts a new one"
                + (f"\n---- last lines of its console ----\n{tail}\n----" if tail else ""))
    return f"no lab is up (the last one stopped: {why}); start one: scripts/lab.sh up"


def host_path(name, path):
    """The file NAME names on PATH (the host's root is the guest's, so the
    same file there), or NAME itself if it has a slash or none is found.
    Busybox's setsid would otherwise run busybox's own applet for a name it
    has one for: `exec -- timeout` was busybox's timeout (status 143 where
    coreutils' says 124), `exec -- ip` busybox's ip."""
    if "/" not in name:
        for folder in path.split(":"):
            found = os.path.join(folder, name)
            if folder.startswith("/") and os.path.isfile(found) and os.access(found, os.X_OK):
                return found
    return name


def cmd_exec(state, secs, cwd, argv):
    try:
        s = connect(state)
    except OSError:
        say("exec:", not_up(state))
        return EXIT_LAB_FAILED
    env = {"LAB": "1", "HOME": "/tmp/home", "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "TERM": os.environ.get("TERM", "dumb")}
    for name in os.environ.get("LAB_ENV", "").split():
        if name in os.environ:
            env[name] = os.environ[name]
    s.sendall(json.dumps({"op": "exec", "argv": [host_path(argv[0], env["PATH"])] + argv[1:],
                          "env": env, "cwd": cwd,
                          "timeout": secs}).encode() + b"\n")

    def forward(signum, _frame):
        try:
            s.sendall(json.dumps({"kill": signal.Signals(signum).name[3:]}).encode() + b"\n")
        except OSError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    # Output into a closed pipe ends us as it would end the command itself.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    f = s.makefile("rb")
    out, err = sys.stdout.buffer, sys.stderr.buffer
    while True:
        try:
            line = f.readline()
        except InterruptedError:
            continue
        if not line:
            say("exec: the lab went away while", argv[0], "ran:", not_up(state))
            return EXIT_LAB_FAILED
        msg = json.loads(line)
        if "o" in msg:
            out.write(base64.b64decode(msg["o"]))
            out.flush()
        elif "e" in msg:
            err.write(base64.b64decode(msg["e"]))
            err.flush()
        elif "exit" in msg:
            if msg.get("timed_out"):  # not a command that itself ended 124
                say(f"exec: {argv[0]} was still running after --timeout {secs} s; killed in the guest")
            return msg["exit"]
        elif "error" in msg:
            say("exec:", msg["error"])
            return msg.get("status", EXIT_LAB_FAILED)


def ask(state, op):
    s = connect(state)
    s.settimeout(10)
    s.sendall(json.dumps({"op": op}).encode() + b"\n")
    return json.loads(s.makefile("rb").readline() or b"{}")


def cmd_status(state):
    try:
        st = ask(state, "status")
    except (OSError, ValueError):
        print("lab.sh:", not_up(state).splitlines()[0])
        return EXIT_NOT_UP
    since = time.strftime("%H:%M:%S", time.localtime(st["since"]))
    print(f"lab.sh: up since {since} (qemu pid {st['qemu']}), {st['jobs']} command(s) running, "
          f"idle {st['idle']} s of {st['idle_limit']} s before it stops by itself")
    return 0


# agent.pid names the supervisor by its PID and its start time, so that a
# PID the kernel has since given to another process is never signalled.
def start_time(pid):
    """PID's start time (clock ticks since boot: field 22 of /proc/PID/stat),
    or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # Field 2, the command's name in parentheses, may hold spaces.
    return int(stat[stat.rindex(b")") + 2:].split()[19])


def supervisor(state):
    """(pidfd, PID) of the supervisor of the lab in STATE, if it runs; else
    None, and a stale agent.pid is removed."""
    try:
        with open(os.path.join(state, "agent.pid")) as f:
            pid, started = (int(w) for w in f.read().split())
    except (OSError, ValueError):
        return None
    try:
        # Held open, the pidfd names this process even if it ends and its
        # PID is reused; it is ours if it started when agent.pid says.
        fd = os.pidfd_open(pid)
    except OSError:
        fd = None
    if fd is not None and start_time(pid) == started:
        return fd, pid
    if fd is not None:
        os.close(fd)
    forget_supervisor(state, pid)
    return None


def forget_supervisor(state, pid=None):
    """Remove agent.pid if it names PID (by default this process)."""
    path = os.path.join(state, "agent.pid")
    try:
        with open(path) as f:
            if int(f.read().split()[0]) == (pid or os.getpid()):
                os.unlink(path)
    except (OSError, ValueError, IndexError):
        pass


def ended(pidfd, secs):
    """True once the process of PIDFD has ended, within SECS."""
    return bool(select.select([pidfd], [], [], secs)[0])


def cmd_down(state):
    ours = supervisor(state)
    try:
        ask(state, "down")
    except (OSError, ValueError):
        if ours is None:
            return 0
        signal.pidfd_send_signal(ours[0], signal.SIGTERM)
    if ours is None:
        return 0
    pidfd, pid = ours
    # The supervisor stops qemu (its child) before it ends itself; qemu
    # dies with it in any case (die_with_parent).
    if not ended(pidfd, 20):
        say("down: the supervisor did not stop in 20 s; killing it (and so its qemu)")
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        ended(pidfd, 5)
    os.close(pidfd)
    forget_supervisor(state, pid)  # if it was killed, it could not
    return 0


def cmd_qmp(sock, commands):
    """Send each JSON command to qemu's monitor (QMP) at sock, in order;
    exit 1 naming the first one qemu refused."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    try:
        s.connect(sock)
    except OSError as e:
        say(f"qmp: cannot reach qemu's monitor at {sock}: {e}")
        return EXIT_LAB_FAILED
    f = s.makefile("rwb")

    def answer():
        while True:
            line = f.readline()
            if not line:
                raise ConnectionError("qemu closed its monitor")
            msg = json.loads(line)
            if "event" not in msg:  # events come unasked; skip them
                return msg

    answer()  # the greeting
    for text in ['{"execute": "qmp_capabilities"}'] + commands:
        f.write(text.encode() + b"\n")
        f.flush()
        msg = answer()
        if "error" in msg:
            say(f"qmp: qemu refused {text}: {msg['error'].get('desc', msg['error'])}")
            return 1
    return 0


def main(argv):
    if len(argv) < 3:
        say("agent.py: usage: see its header")
        return 2
    cmd, state = argv[1], argv[2]
    if cmd == "up":
        return cmd_up(state, int(argv[3]))
    if cmd == "exec":
        return cmd_exec(state, int(argv[3]), argv[4], argv[6:])
    if cmd == "status":
        return cmd_status(state)
    if cmd == "down":
        return cmd_down(state)
    if cmd == "qmp":
        return cmd_qmp(state, argv[3:])
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
