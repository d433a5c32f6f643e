"""Hosts made of Linux network namespaces on this machine, joined by shaped links.

    with Cluster(["h1", "h2"], ranks_per_host=2, rate="1gbit", loss=0) as c:
        c.host("h1")            # namespace = host name for tuttirun ("tutti12-h1")
        c.tuttirun_args()       # --hostfile/--rsh-agent/--network-interface for tuttirun
        c.kill_all("h1")        # SIGKILL every process of that host
        c.cut_link("h1")        # its link down: processes live, packets stop
        c.drop_all("h1")        # nftables drops every packet of its link (a black hole)
        c.set_loss("h1", 1.0)   # 1 % of the packets it sends dropped

Topology: a bridge `tt<k>-br` in the root namespace with 10.77.<k>.1/24 and,
per host i (0-based), a namespace `tutti<k>-<name>` holding `tt<k>-<name>p`
at 10.77.<k>.(11+i)/24 (default route via the bridge), the other end
`tt<k>-<name>` a port of the bridge. Each link is one NIC: MTU 1500; with a
rate, a tbf shaper on both ends' egress (what the host sends and what it
receives each get the rate); with a delay, netem on the host's egress where
the kernel has netem; with a loss, an nftables rule in the namespace drops
that share of the packets the host sends (`numgen random`). What could not
be applied is in `not_applied` (and printed by scripts/cluster) - never
silently left out. /etc/netns/<namespace>/hosts names every host, so inside
a namespace the hosts resolve by name.

tuttirun runs in the root namespace: its rendezvous server (0.0.0.0) is
reached at the bridge's address (`--network-interface tt<k>-br`); ranks
start through `--rsh-agent 'ip netns exec {host}'`. Ranks in one namespace
share memory (tutti's shared-memory identity includes the network
namespace, ops/tcp/shm_channel.cc); ranks of two namespaces talk TCP over
their links only.

k (10..249) is free when no state file names it and no interface uses its
subnet. Every cluster has a state file (STATE_DIR/<name>.json) written before
anything is made, so `down` removes everything also after a crash; a
cluster whose owner process died (tests) is removed by the next `up`.
Needs root (CAP_NET_ADMIN) and iproute2 (nftables for loss): `available()`
says why not.
"""
import fcntl
import ipaddress
import json
import os
import re
import signal
import subprocess
import time

STATE_DIR = os.environ.get("TUTTI_CLUSTER_STATE_DIR", "/run/tutti-cluster")
NETNS_ETC = "/etc/netns"
MTU = 1500
K_RANGE = range(10, 250)
_NAME = re.compile(r"^[a-z][a-z0-9]{0,7}$")
_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def _run(args, check=True, ns=None, input=None):
    if ns is not None:
        args = ["ip", "netns", "exec", ns] + args
    r = subprocess.run(args, capture_output=True, text=True, input=input)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (exit %d): %s" % (" ".join(args), r.returncode,
                                                        r.stderr.strip()))
    return r


def _ip(*args, check=True):
    return _run(["ip"] + list(args), check=check)


def available():
    """None when namespaces can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "needs root (CAP_NET_ADMIN) to create network namespaces"
    probe = "tuttiprobe%d" % os.getpid()
    try:
        r = _ip("netns", "add", probe, check=False)
    except FileNotFoundError:
        return "iproute2 (the ip command) is not installed"
    if r.returncode != 0:
        return "ip netns add failed: " + r.stderr.strip()
    _ip("netns", "del", probe, check=False)
    return None


def parse_rate(text):
    """tc's rate ("1gbit", "100mbit", "125mbps" = bytes) in bits per second."""
    m = re.fullmatch(r"([0-9.]+)([kmgt]?)(bit|bps)", text.strip().lower())
    if not m:
        raise ValueError("rate %r: expected a number and a unit such as 1gbit, 100mbit, "
                         "10kbit or 125mbps (bytes)" % text)
    bits = float(m.group(1)) * _UNITS[m.group(2)] * (8 if m.group(3) == "bps" else 1)
    if bits < 8000:
        raise ValueError("rate %r: below 8kbit" % text)
    return bits


def parse_delay(text):
    """"50us", "1ms", "0.5ms", "0" in microseconds."""
    m = re.fullmatch(r"([0-9.]+)(us|ms|s)?", text.strip().lower())
    if not m or (m.group(2) is None and float(m.group(1)) != 0):
        raise ValueError("delay %r: expected a duration such as 50us, 1ms or 0" % text)
    return float(m.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6, None: 0}[m.group(2)]


def parse_loss(text):
    """"1%", "0.5", "0%" in percent, in [0, 100]."""
    value = float(str(text).strip().rstrip("%"))
    if not 0 <= value <= 100:
        raise ValueError("loss %r: expected a percentage in [0, 100]" % text)
    return value


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _kill(pid, sig=signal.SIGKILL):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class Cluster:
    """N hosts as namespaces (see the module's docstring). `names`: host names
    (a lowercase letter, then up to 7 letters or digits) or a count n for
    h1..hn. `persistent`: the cluster outlives this process (scripts/cluster);
    otherwise the next `up` of anyone removes it once this process is gone."""

    def __init__(self, names, ranks_per_host=1, rate=None, delay=None, loss=0.0, name=None,
                 persistent=False):
        if isinstance(names, int) and names < 1:
            raise ValueError("%d hosts: expected at least 1" % names)
        self.names = ["h%d" % (i + 1) for i in range(names)] if isinstance(names, int) else \
            list(names)
        bad = [n for n in self.names if not _NAME.match(n)]
        if bad or not self.names or len(set(self.names)) != len(self.names):
            raise ValueError("host names %s: expected distinct names of a lowercase letter "
                             "and up to 7 letters or digits" % self.names)
        if len(self.names) > 200:
            raise ValueError("%d hosts: at most 200 fit a /24" % len(self.names))
        if ranks_per_host < 1:
            raise ValueError("ranks per host %d: expected at least 1" % ranks_per_host)
        self.ranks_per_host = ranks_per_host
        self.rate = rate
        self.rate_bits = parse_rate(rate) if rate else None
        self.delay_us = parse_delay(delay) if delay else 0.0
        self.loss = parse_loss(loss) if loss else 0.0
        self.name = name or "test-%d-%d" % (os.getpid(), id(self) % 100000)
        self.persistent = persistent
        self.k = None
        self.applied, self.not_applied = [], []

    # --- naming -------------------------------------------------------------------------
    def host(self, name):
        """The namespace (host name for tuttirun) of host `name`."""
        return "tutti%d-%s" % (self.k, name)

    def hosts(self):
        return [self.host(n) for n in self.names]

    def _veth(self, name):
        return "tt%d-%s" % (self.k, name)

    def interface(self, name):
        """The link's interface inside host `name`'s namespace."""
        return self._veth(name) + "p"

    @property
    def bridge(self):
        return "tt%d-br" % self.k

    @property
    def bridge_address(self):
        return "10.77.%d.1" % self.k

    def address(self, name):
        return "10.77.%d.%d" % (self.k, 11 + self.names.index(name))

    @property
    def hostfile(self):
        return os.path.join(STATE_DIR, self.name + ".hosts")

    def tuttirun_args(self, hosts=None, slots=None):
        """Flags that run a tuttirun job on this cluster: every host with
        ranks_per_host slots (its hostfile), or `hosts` (names) with `slots` each."""
        where = ["--hostfile", self.hostfile] if hosts is None else \
            ["-H", ",".join("%s:%d" % (self.host(h), slots or self.ranks_per_host)
                            for h in hosts)]
        return where + ["--rsh-agent", "ip netns exec {host}", "--network-interface",
                        self.bridge]

    # --- state --------------------------------------------------------------------------
    def _state_path(self):
        return os.path.join(STATE_DIR, self.name + ".json")

    def _save(self):
        state = {"name": self.name, "k": self.k, "names": self.names,
                 "ranks_per_host": self.ranks_per_host, "rate": self.rate,
                 "delay_us": self.delay_us, "loss": self.loss,
                 "owner_pid": None if self.persistent else os.getpid(),
                 "applied": self.applied, "not_applied": self.not_applied}
        tmp = self._state_path() + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f, indent=1)
        os.replace(tmp, self._state_path())

    @classmethod
    def load(cls, name):
        """The cluster of state file `name`; FileNotFoundError when there is none."""
        with open(os.path.join(STATE_DIR, name + ".json")) as f:
            s = json.load(f)
        c = cls(s["names"], s["ranks_per_host"], s["rate"], None, s["loss"], s["name"],
                s["owner_pid"] is None)
        c.k, c.delay_us = s["k"], s["delay_us"]
        c.applied, c.not_applied = s["applied"], s["not_applied"]
        c.owner_pid = s["owner_pid"]
        return c

    @staticmethod
    def names_up():
        """Names of the clusters that have a state file."""
        if not os.path.isdir(STATE_DIR):
            return []
        return sorted(f[:-5] for f in os.listdir(STATE_DIR) if f.endswith(".json"))

    # --- lifecycle ----------------------------------------------------------------------
    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()
        return False

    def up(self):
        """Makes the cluster; on any error removes what it made and raises."""
        os.makedirs(STATE_DIR, exist_ok=True)
        with open(os.path.join(STATE_DIR, ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if os.path.exists(self._state_path()):
                raise RuntimeError("cluster %r is already up (scripts/cluster down --name %s)"
                                   % (self.name, self.name))
            self.k = self._free_k()
            self._save()  # before anything exists: down() finds it after a crash
        try:
            self._make()
            self._save()
        except BaseException:
            self.down()
            raise
        return self

    def _free_k(self):
        used = set()
        for other in Cluster.names_up():
            try:
                c = Cluster.load(other)
            except (OSError, ValueError, KeyError):
                continue
            if c.owner_pid is not None and not _alive(c.owner_pid):
                c.down()  # a test that died without cleaning up
            else:
                used.add(c.k)
        taken = [ipaddress.ip_interface(a).network for a in _root_addresses()]
        for k in K_RANGE:
            net = ipaddress.ip_network("10.77.%d.0/24" % k)
            if k in used or any(net.overlaps(t) for t in taken):
                continue
            self.k = k
            self._remove_objects()  # leftovers of k without a state file
            return k
        raise RuntimeError("no free subnet in 10.77.10-249.0/24 (%d clusters up)" % len(used))

    def _make(self):
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", self.bridge_address + "/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "mtu", str(MTU), "up")
        for name in self.names:
            ns, veth = self.host(name), self._veth(name)
            _ip("netns", "add", ns)
            _ip("link", "add", veth, "mtu", str(MTU), "type", "veth", "peer", "name", veth + "p",
                "mtu", str(MTU))
            _ip("link", "set", veth + "p", "netns", ns)
            _ip("link", "set", veth, "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", self.address(name) + "/24", "dev", veth + "p")
            _ip("-n", ns, "link", "set", veth + "p", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "route", "add", "default", "via", self.bridge_address)
        self._write_names()
        for name in self.names:
            self._shape(name)
        with open(self.hostfile, "w") as f:
            f.write("".join("%s slots=%d\n" % (h, self.ranks_per_host) for h in self.hosts()))

    def _write_names(self):
        lines = ["127.0.0.1 localhost", "%s %s" % (self.bridge_address, "tutti%d-root" % self.k)]
        lines += ["%s %s" % (self.address(n), self.host(n)) for n in self.names]
        for ns in self.hosts():
            os.makedirs(os.path.join(NETNS_ETC, ns), exist_ok=True)
            with open(os.path.join(NETNS_ETC, ns, "hosts"), "w") as f:
                f.write("\n".join(lines) + "\n")

    def down(self):
        """Stops every process in the hosts and removes everything this cluster made."""
        if self.k is None:
            return
        self._remove_objects()
        for path in (self.hostfile, self._state_path()):
            if os.path.exists(path):
                os.unlink(path)

    def _remove_objects(self):
        """The namespaces, links and files of subnet k: ours, or a crashed run's."""
        prefix = "tutti%d-" % self.k
        for ns in _netns_list():
            if ns.startswith(prefix):
                for pid in _pids_of(ns):
                    _kill(pid)
                _ip("netns", "del", ns, check=False)
                etc = os.path.join(NETNS_ETC, ns)
                if os.path.isdir(etc):
                    for f in os.listdir(etc):
                        os.unlink(os.path.join(etc, f))
                    os.rmdir(etc)
        for link in _root_links():
            if link.startswith("tt%d-" % self.k):
                _ip("link", "del", link, check=False)

    # --- processes and faults -----------------------------------------------------------
    def pids(self, name):
        """Processes in host `name`'s namespace."""
        return _pids_of(self.host(name))

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
            _kill(pid, signal.SIGSTOP)
        return len(pids)

    def cut_link(self, name):
        """Takes host `name`'s link down at the bridge: its processes live on, unreachable."""
        _ip("link", "set", self._veth(name), "down")

    def restore_link(self, name):
        _ip("link", "set", self._veth(name), "up")
        _run(["nft", "delete", "table", "inet", "tutti_cut"], check=False, ns=self.host(name))

    def drop_all(self, name):
        """nftables in host `name` drops every packet its link sends or receives (the
        link stays up: a black hole, as a dead switch port; loopback still works)."""
        dev = self.interface(name)
        rules = ("table inet tutti_cut {\n"
                 " chain in { type filter hook input priority -10; iifname \"%s\" drop; }\n"
                 " chain out { type filter hook output priority -10; oifname \"%s\" drop; }\n"
                 "}\n" % (dev, dev))
        _run(["nft", "-f", "-"], ns=self.host(name), input=rules)

    def set_loss(self, name, percent):
        """Drops `percent` % of the packets host `name` sends (0: none)."""
        percent = parse_loss(percent)
        ns, dev = self.host(name), self.interface(name)
        _run(["nft", "delete", "table", "inet", "tutti_loss"], check=False, ns=ns)
        if percent > 0:
            rule = ("table inet tutti_loss {\n chain out { type filter hook output priority 0; "
                    "oifname \"%s\" numgen random mod 10000 < %d counter drop; }\n}\n"
                    % (dev, round(percent * 100)))
            _run(["nft", "-f", "-"], ns=ns, input=rule)

    # --- shaping ------------------------------------------------------------------------
    def _note(self, lst, text):
        if text not in lst:
            lst.append(text)

    def _shape(self, name):
        """The rate, delay and loss of host `name`'s link, as far as the kernel allows."""
        ns, veth = self.host(name), self._veth(name)
        parent = ["root", "handle", "1:"]
        if self.delay_us > 0:
            r = _run(["tc", "-n", ns, "qdisc", "add", "dev", veth + "p", "root", "handle", "1:",
                      "netem", "delay", "%dus" % self.delay_us, "limit", "100000"], check=False)
            if r.returncode == 0:
                parent = ["parent", "1:1", "handle", "10:"]
                self._note(self.applied, "delay %gus on what each host sends (netem)" %
                           self.delay_us)
            else:
                self._note(self.not_applied, "delay %gus: this kernel has no netem (tc said: %s)"
                           % (self.delay_us, r.stderr.strip()))
        if self.rate_bits:
            burst = int(max(self.rate_bits / 8 / 1000, 4 * (MTU + 14)))  # 1 ms of the rate
            tbf = ["tbf", "rate", "%dbit" % self.rate_bits, "burst", str(burst),
                   "latency", "10ms"]
            # What the host sends (its egress) and what it receives (the bridge port's).
            _run(["tc", "-n", ns, "qdisc", "add", "dev", veth + "p"] + parent + tbf)
            _run(["tc", "qdisc", "add", "dev", veth, "root", "handle", "1:"] + tbf)
            self._note(self.applied, "rate %s each way on every link (tbf, burst %d B)" %
                       (self.rate, burst))
        if self.loss > 0:
            try:
                self.set_loss(name, self.loss)
                self._note(self.applied, "loss %g%% of what each host sends (nftables numgen)"
                           % self.loss)
            except (RuntimeError, FileNotFoundError) as e:
                self._note(self.not_applied, "loss %g%%: nftables failed (%s; Debian package "
                           "nftables)" % (self.loss, e))

    def dropped(self, name):
        """Packets the loss rule of host `name` has dropped so far (0 without one)."""
        r = _run(["nft", "list", "table", "inet", "tutti_loss"], check=False, ns=self.host(name))
        m = re.search(r"counter packets (\d+)", r.stdout)
        return int(m.group(1)) if m else 0

    def wait_empty(self, seconds):
        """Waits until no host runs a process; returns {host: pids} of what is left."""
        deadline = time.monotonic() + seconds
        while True:
            left = {n: self.pids(n) for n in self.names}
            left = {n: p for n, p in left.items() if p}
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)


def _netns_list():
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.split()]


def _root_links():
    out = _ip("-o", "link", "show", check=False).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()
            if line.count(":") >= 2]


def _root_addresses():
    out = _ip("-o", "-4", "addr", "show", check=False).stdout
    return [line.split()[3] for line in out.splitlines() if len(line.split()) > 3]


def _pids_of(ns):
    r = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in r.stdout.split()]


_BLAST = r"""
import socket, sys, time
role, addr, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
if role == "recv":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, 5201)); s.listen(1); print("ready", flush=True)
    c, _ = s.accept(); n = 0; t0 = None
    while True:
        b = c.recv(1 << 20)
        if not b: break
        if t0 is None: t0 = time.monotonic()
        n += len(b)
    print("%d %.6f" % (n, time.monotonic() - t0), flush=True)
else:
    s = socket.create_connection((addr, 5201)); buf = b"x" * (1 << 20)
    end = time.monotonic() + seconds
    while time.monotonic() < end: s.sendall(buf)
    s.close()
"""


def measure_rate(cluster, sender, receiver, seconds=3.0, python="python3"):
    """Bits per second of one TCP stream from host `sender` to host `receiver`
    (bytes the receiver read / time from its first byte to the end)."""
    recv = subprocess.Popen(["ip", "netns", "exec", cluster.host(receiver), python, "-c", _BLAST,
                             "recv", cluster.address(receiver), str(seconds)],
                            stdout=subprocess.PIPE, text=True)
    try:
        if recv.stdout.readline().strip() != "ready":
            raise RuntimeError("the receiver in %s did not start" % receiver)
        _run([python, "-c", _BLAST, "send", cluster.address(receiver), str(seconds)],
             ns=cluster.host(sender))
        out = recv.communicate(timeout=seconds + 30)[0].split()
    finally:
        if recv.poll() is None:
            recv.kill()
    return int(out[0]) * 8 / float(out[1])
