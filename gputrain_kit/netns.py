"""Keep local workers off the network: a private network namespace that has only loopback.

TensorFlow's gRPC server listens on every interface (``0.0.0.0:port``) whatever address
``TF_CONFIG`` names, and its distributed runtime has no authentication (TensorFlow's
SECURITY.md: run it on trusted networks only). ``launch_local_workers`` therefore starts a
small *holder* process in a new Linux user + network namespace (no root needed where the
system allows unprivileged user namespaces), brings its loopback interface up, and has
every worker join that namespace before Python imports anything. The workers reach each
other on 127.0.0.1 inside it; nothing outside the namespace can reach their ports, and
they do not appear among the host's listening sockets at all.

Where namespaces are not available (macOS, Windows, a kernel or AppArmor policy that
forbids them), ``start_private_network`` returns the reason and the launcher warns before
starting the workers.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

__all__ = ["PrivateNetwork", "start_private_network", "worker_command"]

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_READY = "GPUTRAIN_NETNS_READY"


@dataclass
class PrivateNetwork:
    """A running holder process; its namespaces live as long as it does."""
    process: subprocess.Popen

    @property
    def pid(self) -> int:
        return self.process.pid

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


def start_private_network(timeout: float = 10) -> PrivateNetwork | str:
    """Start a holder in a new user + network namespace with loopback up.

    Returns the running ``PrivateNetwork``, or a sentence saying why none could be made.
    """
    if not sys.platform.startswith("linux"):
        return f"network namespaces exist on Linux only (this is {sys.platform})"
    try:
        # run as a file, not as part of the package: importing the package starts NumPy's threads, and
        # unshare(CLONE_NEWUSER) needs a single-threaded process
        proc = subprocess.Popen([sys.executable, "-I", __file__], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=dict(os.environ, GPUTRAIN_LAUNCHER_PID=str(os.getpid())))
    except OSError as err:
        return f"the namespace holder could not start ({err})"
    import selectors
    selector = selectors.DefaultSelector()
    assert proc.stdout is not None
    selector.register(proc.stdout, selectors.EVENT_READ)
    line = ""
    if selector.select(timeout):
        line = proc.stdout.readline().strip()
    selector.close()
    if line == _READY:
        return PrivateNetwork(proc)
    proc.kill()
    rest = ""
    try:
        rest = proc.communicate(timeout=5)[0] or ""
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass
    reason = (line + " " + rest).strip() or "it did not answer in time"
    return f"a private network namespace could not be made: {reason}"


def _libc():
    import ctypes
    return ctypes.CDLL(None, use_errno=True)


def _os_error(what: str) -> OSError:
    import ctypes
    errno = ctypes.get_errno()
    return OSError(errno, f"{what}: {os.strerror(errno)}")


def _loopback_up() -> None:
    import fcntl
    import socket
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH", fcntl.ioctl(s.fileno(), siocgifflags, struct.pack("16sH14x", b"lo", 0))[:18])[1]
        fcntl.ioctl(s.fileno(), siocsifflags, struct.pack("16sH14x", b"lo", flags | iff_up))


def _holder() -> int:
    """``python -m gputrain_kit.netns``: unshare, set loopback up, say ready, wait for stdin to close."""
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    try:
        if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
            raise _os_error("unshare(CLONE_NEWUSER | CLONE_NEWNET)")
        try:
            with open("/proc/self/setgroups", "w") as f:
                f.write("deny")
        except OSError:
            pass
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"{gid} {gid} 1")
        _loopback_up()
        import socket
        names = sorted(name for _, name in socket.if_nameindex())
        if names != ["lo"]:
            raise OSError(f"the new namespace has interfaces {names}, expected only lo")
        with socket.socket() as server, socket.socket() as client:   # loopback really works
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            client.connect(server.getsockname())
    except OSError as err:
        print(f"{err}", flush=True)
        return 1
    launcher = os.environ.get("GPUTRAIN_LAUNCHER_PID")
    if launcher:
        libc.prctl(1, 9)                     # PR_SET_PDEATHSIG, SIGKILL: never outlive the launcher
        if os.getppid() != int(launcher):
            return 1
    print(_READY, flush=True)
    sys.stdin.read()                         # until the launcher closes our stdin or kills us
    return 0


def worker_command(network: PrivateNetwork | None, command: list[str]) -> list[str]:
    """``command`` (``[python, ...]``) run inside ``network``: this file joins the namespaces first, then
    execs the command (same process id), before anything could start a thread."""
    if network is None:
        return command
    return [sys.executable, "-I", __file__, "--join", str(network.pid), "--", *command]


def _join(pid: str) -> None:
    """Join the holder's user and network namespaces (this process must be single-threaded)."""
    libc = _libc()
    user = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        if os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user"):
            if libc.setns(user, _CLONE_NEWUSER) != 0:
                raise _os_error(f"joining the user namespace of process {pid}")
        if libc.setns(net, _CLONE_NEWNET) != 0:
            raise _os_error(f"joining the network namespace of process {pid}")
    finally:
        os.close(user)
        os.close(net)


def join_or_exit(pid: str) -> None:
    """In a worker about to start (single-threaded): join the holder's namespaces, or say why not and
    exit with status 1, which the launcher reports as that worker's failure."""
    try:
        _join(pid)
    except OSError as err:
        print(f"gputrain_kit: this worker could not join the private network: {err}", flush=True)
        os._exit(1)


if __name__ == "__main__":
    if len(sys.argv) > 4 and sys.argv[1] == "--join" and sys.argv[3] == "--":
        join_or_exit(sys.argv[2])
        os.execv(sys.argv[4], sys.argv[4:])
    sys.exit(_holder())
