"""Hosts made of Linux network namespaces, for multi-host elastic jobs on one machine.

    with NetnsCluster(["h1", "h2"]) as cluster:
        cluster.host("h1")          # namespace name to give tuttirun ("t12h1")
        cluster.bridge              # interface on the root side ("t12br")
        cluster.pids("h1")          # processes running in that namespace
        cluster.kill_all("h1")      # SIGKILL them
        cluster.cut_link("h1")      # its link down: processes live, packets stop

Each host is a namespace with a veth pair to a bridge in the root namespace;
the bridge has 10.77.<k>.1/24 and host i has 10.77.<k>.(10+i), with a default
route through the bridge, so hosts reach each other and tuttirun's rendezvous
server (bound on 0.0.0.0 in the root namespace, advertised at the bridge's
address with `--network-interface <bridge>`). Start workers there with
`tuttirun --rsh-agent 'ip netns exec {host}'`.

k is chosen so that tests running at the same time do not collide (a lock
file per k). Everything is removed on exit, also after a failed test.
Needs root (CAP_NET_ADMIN) and iproute2: `available()` says why not.
"""
import fcntl
import os
import signal
import subprocess
import time

LOCK_DIR = "/tmp/tutti-netns-locks"


def _ip(*args, check=True):
    return subprocess.run(["ip"] + list(args), capture_output=True, text=True, check=check)


def available():
    """None when namespaces can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "needs root (CAP_NET_ADMIN) to create network namespaces"
    try:
        probe = "tuttiprobe%d" % os.getpid()
        r = _ip("netns", "add", probe, check=False)
        if r.returncode != 0:
            return "ip netns add failed: " + r.stderr.strip()
        _ip("netns", "del", probe, check=False)
    except FileNotFoundError:
        return "iproute2 (the ip command) is not installed"
    return None


class NetnsCluster:
    def __init__(self, names):
        self.names = list(names)
        self.k = None
        self._lock = None
        self.bridge = None
        self.created = []

    # --- naming -----------------------------------------------------------------------
    def host(self, name):
        """The namespace (host name for tuttirun) of logical host `name`."""
        return "t%d%s" % (self.k, name)

    def _veth(self, name):
        return "t%dv%s" % (self.k, name)

    def address(self, name):
        return "10.77.%d.%d" % (self.k, 10 + self.names.index(name) + 1)

    # --- lifecycle --------------------------------------------------------------------
    def __enter__(self):
        os.makedirs(LOCK_DIR, exist_ok=True)
        for k in range(10, 250):
            f = open(os.path.join(LOCK_DIR, str(k)), "w")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                continue
            self.k, self._lock = k, f
            break
        if self.k is None:
            raise RuntimeError("no free test subnet in 10.77.10-249.0/24")
        self._remove_leftovers()
        try:
            self.bridge = "t%dbr" % self.k
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", "10.77.%d.1/24" % self.k, "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for name in self.names:
                ns, veth = self.host(name), self._veth(name)
                _ip("netns", "add", ns)
                self.created.append(ns)
                _ip("link", "add", veth, "type", "veth", "peer", "name", veth + "p")
                _ip("link", "set", veth + "p", "netns", ns)
                _ip("link", "set", veth, "master", self.bridge, "up")
                _ip("-n", ns, "addr", "add", self.address(name) + "/24", "dev", veth + "p")
                _ip("-n", ns, "link", "set", veth + "p", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "route", "add", "default", "via", "10.77.%d.1" % self.k)
        except Exception:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        for name in self.names:
            if self.k is not None:
                self.kill_all(name)
        self._remove_leftovers()
        if self._lock is not None:
            self._lock.close()
        return False

    def _remove_leftovers(self):
        """Namespaces, veths and the bridge of subnet k (ours, or a crashed run's)."""
        out = _ip("netns", "list", check=False).stdout
        for line in out.splitlines():
            ns = line.split()[0] if line.split() else ""
            if ns.startswith("t%d" % self.k) and ns[len("t%d" % self.k):][:1].isalpha():
                for pid in self._pids_of(ns):
                    _kill(pid)
                _ip("netns", "del", ns, check=False)
        for name in self.names:
            _ip("link", "del", self._veth(name), check=False)
        _ip("link", "del", "t%dbr" % self.k, check=False)

    # --- processes and faults ---------------------------------------------------------
    @staticmethod
    def _pids_of(ns):
        r = _ip("netns", "pids", ns, check=False)
        return [int(p) for p in r.stdout.split()]

    def pids(self, name):
        """Processes in host `name`'s namespace."""
        return self._pids_of(self.host(name))

    def kill_all(self, name):
        """SIGKILLs every process of host `name`; returns how many there were."""
        pids = self.pids(name)
        for pid in pids:
            _kill(pid)
        return len(pids)

    def stop_all(self, name, comm):
        """SIGSTOPs every process of host `name` whose command name (/proc/PID/comm)
        is `comm` (they stay, frozen; tuttirun's remote shell there does not);
        returns how many."""
        pids = []
        for pid in self.pids(name):
            try:
                with open("/proc/%d/comm" % pid) as f:
                    if f.read().strip() == comm:
                        pids.append(pid)
            except OSError:
                pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        return len(pids)

    def cut_link(self, name):
        """Takes host `name`'s link down: its processes live on, unreachable."""
        _ip("link", "set", self._veth(name), "down")

    def wait_empty(self, seconds):
        """Waits until no host runs a process; returns {host: pids} of what is left."""
        deadline = time.monotonic() + seconds
        while True:
            left = {n: self.pids(n) for n in self.names}
            left = {n: p for n, p in left.items() if p}
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
