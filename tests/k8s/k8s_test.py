#!/usr/bin/python3
"""examples/k8s (Kubeflow's MPI Operator) without Kubernetes:

  1. mpijob.yaml and mpijob-elastic.yaml parse (python3-yaml) as v2beta1
     MPIJobs whose launcher runs tuttirun and whose workers run sshd, all on
     the image the Dockerfile builds; the Dockerfile's Debian packages exist
     (apt-cache) and the paths the manifests run are in the image's copy.
  2. The launcher's commands run as the operator would run them, against a
     fake /etc/mpi made here (hostfile in the operator's format, and
     discover_hosts.sh), with OMPI_MCA_orte_default_hostfile set, the workers
     being 127.0.0.2 and 127.0.0.3 of a private sshd (as scripts/test-ssh):
     the fixed job places 2 ranks per worker from the hostfile and trains
     with equal parameters; the elastic job takes its workers from
     discover_hosts.sh and finishes with equal parameters.

    k8s_test.py --tuttirun T --library L

Only the image's paths (/opt/tutti -> this checkout, /etc/mpi -> the fake
directory) are rewritten, the ssh port and key added, and the training cut
short. Needs root (sshd on 127.0.0.2-3). Exits 77 (ctest's skip) without sshd
or PyYAML, except under CI=true.
"""

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
K8S = os.path.join(REPO, "examples", "k8s")
sys.path.insert(0, os.path.join(REPO, "tests", "launcher"))
from job_util import fail, run_logged  # noqa: E402
PYTHON = "/usr/bin/python3"
SSHD = "/usr/sbin/sshd"
SHORT = {"torch_fashion_mnist.py": ["--train-fraction", "0.02", "--max-steps", "8",
                                    "--log-interval", "2"],
         "torch_fashion_mnist_elastic.py": ["--train-samples", "512", "--commit-every", "4"]}


def load_manifest(name):
    import yaml
    with open(os.path.join(K8S, name)) as f:
        job = yaml.safe_load(f)
    where = "%s: " % name
    if job.get("apiVersion") != "kubeflow.org/v2beta1" or job.get("kind") != "MPIJob":
        fail(where + "expected apiVersion kubeflow.org/v2beta1, kind MPIJob")
    spec = job["spec"]
    if not isinstance(spec.get("slotsPerWorker"), int) or spec["slotsPerWorker"] < 1:
        fail(where + "slotsPerWorker must be a positive integer")
    launcher = spec["mpiReplicaSpecs"]["Launcher"]
    worker = spec["mpiReplicaSpecs"]["Worker"]
    if launcher.get("replicas") != 1 or worker.get("replicas", 0) < 1:
        fail(where + "expected 1 launcher and at least 1 worker")
    (lc,) = launcher["template"]["spec"]["containers"]
    (wc,) = worker["template"]["spec"]["containers"]
    if lc["image"] != wc["image"]:
        fail(where + "launcher and workers run different images")
    if lc["command"][0] != "tuttirun":
        fail(where + "the launcher does not run tuttirun: %s" % lc["command"])
    if wc["command"][0] != "/usr/sbin/sshd":
        fail(where + "the workers do not run sshd: %s" % wc["command"])
    if not all(isinstance(w, str) for w in lc["command"]):
        fail(where + "every command word must be a string (quote numbers)")
    return spec, lc["command"]


def check_dockerfile():
    with open(os.path.join(K8S, "Dockerfile")) as f:
        text = f.read()
    if not re.search(r"^FROM debian:bookworm", text, re.M):
        fail("Dockerfile: expected FROM debian:bookworm")
    if "COPY . /opt/tutti" not in text:
        fail("Dockerfile: expected COPY . /opt/tutti (the manifests run /opt/tutti/...)")
    install = re.search(r"apt-get install -y --no-install-recommends(.*?)&&", text, re.S)
    packages = install.group(1).replace("\\", " ").split()
    for p in packages:
        if subprocess.run(["apt-cache", "show", p], capture_output=True).returncode != 0:
            fail("Dockerfile: no Debian package %s" % p)
    for needed in ("libsodium-dev", "python3-torch", "openssh-server", "libcli11-dev"):
        if needed not in packages:
            fail("Dockerfile: %s is not installed" % needed)
    for cmd in ("cmake --install", "ldconfig", "-DCMAKE_INSTALL_PREFIX=/usr"):
        if cmd not in text:
            fail("Dockerfile: no %s" % cmd)


class Sshd:
    def __init__(self, tmp):
        self.tmp = tmp
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.key = os.path.join(tmp, "user_key")
        for k in ("host_key", "user_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                            os.path.join(tmp, k)], check=True)
        shutil.copy(self.key + ".pub", os.path.join(tmp, "authorized_keys"))
        os.chmod(os.path.join(tmp, "authorized_keys"), 0o600)
        conf = os.path.join(tmp, "sshd_config")
        with open(conf, "w") as f:
            f.write("Port %d\nListenAddress 127.0.0.2\nListenAddress 127.0.0.3\n"
                    "HostKey %s/host_key\nAuthorizedKeysFile %s/authorized_keys\n"
                    "PidFile %s/sshd.pid\nPermitRootLogin yes\nPubkeyAuthentication yes\n"
                    "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
                    "StrictModes no\nLogLevel ERROR\n" % (self.port, tmp, tmp, tmp))
        os.makedirs("/run/sshd", exist_ok=True)
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", conf],
                                     stderr=open(os.path.join(tmp, "sshd.log"), "w"))
        for _ in range(50):
            ok = subprocess.run(["ssh", "-p", str(self.port), "-i", self.key, "-o",
                                 "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o",
                                 "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                                 "127.0.0.2", "true"], capture_output=True).returncode == 0
            if ok:
                return
            if self.proc.poll() is not None:
                fail("sshd exited: " + open(os.path.join(tmp, "sshd.log")).read())
            time.sleep(0.2)
        fail("sshd did not answer")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def localize(command, tuttirun, sshd, etc_mpi):
    """The launcher's command as run here: this checkout's paths, the fake
    /etc/mpi, the private sshd, and a short training run."""
    out = [tuttirun, "-p", str(sshd.port), "-i", sshd.key]
    for word in command[1:]:
        word = word.replace("/opt/tutti", REPO).replace("/etc/mpi", etc_mpi)
        out.append(PYTHON if word == "python3" else word)
    out += SHORT[os.path.basename([w for w in out if w.endswith(".py")][0])]
    return out


def run(cmd, env, timeout=400):
    rc, out = run_logged(cmd, env, timeout)
    if rc != 0:
        fail("the launcher's command exited with %d" % rc)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tuttirun", required=True)
    p.add_argument("--library", required=True)
    args = p.parse_args()
    try:
        import yaml  # noqa: F401
    except ImportError:
        yaml = None
    if yaml is None or not os.access(SSHD, os.X_OK) or os.geteuid() != 0:
        msg = "needs root, sshd and PyYAML (python3-yaml, openssh-server; scripts/install-deps)"
        if os.environ.get("CI") == "true":
            fail(msg)
        print("SKIP: " + msg)
        return 77
    fixed_spec, fixed = load_manifest("mpijob.yaml")
    elastic_spec, elastic = load_manifest("mpijob-elastic.yaml")
    if "-np" in fixed or "-H" in fixed or "--hostfile" in fixed:
        fail("mpijob.yaml: the launcher should take the hosts from the operator's hostfile")
    if "/etc/mpi/discover_hosts.sh" not in elastic:
        fail("mpijob-elastic.yaml: expected --host-discovery-script /etc/mpi/discover_hosts.sh")
    for cmd in (fixed, elastic):
        script = [w for w in cmd if w.endswith(".py")][0]
        if not os.path.exists(script.replace("/opt/tutti", REPO)):
            fail("%s is not in the repository (the image's /opt/tutti)" % script)
    check_dockerfile()

    tmp = tempfile.mkdtemp(prefix="tutti-k8s-test.")
    sshd = None
    try:
        sshd = Sshd(tmp)
        etc_mpi = os.path.join(tmp, "etc", "mpi")
        os.makedirs(etc_mpi)
        slots = fixed_spec["slotsPerWorker"]
        with open(os.path.join(etc_mpi, "hostfile"), "w") as f:
            f.write("127.0.0.2 slots=%d\n127.0.0.3 slots=%d\n" % (slots, slots))
        with open(os.path.join(etc_mpi, "discover_hosts.sh"), "w") as f:
            f.write("#!/bin/sh\necho 127.0.0.2\necho 127.0.0.3\n")
        os.chmod(os.path.join(etc_mpi, "discover_hosts.sh"), 0o755)
        env = dict(os.environ)
        env["OMPI_MCA_orte_default_hostfile"] = os.path.join(etc_mpi, "hostfile")
        env["TUTTI_LIBRARY"] = os.path.abspath(args.library)
        env["PYTHONPATH"] = os.path.join(REPO, "bindings", "python")
        env["TUTTI_TIMEOUT_SECONDS"] = "30"
        for k in [k for k in env if k.startswith("SLURM_")]:
            del env[k]

        cmd = localize(fixed, os.path.abspath(args.tuttirun), sshd, etc_mpi)
        out = run(cmd[:1] + ["--verbose"] + cmd[1:], env)
        for r in range(2 * slots):
            host = "127.0.0.%d" % (2 + r // slots)
            want = "rank %d -> %s (local rank %d/%d" % (r, host, r % slots, slots)
            if want not in out:
                fail("fixed job: no placement line '%s'" % want)
        sums = set(re.findall(r"rank (\d+): parameter checksum (\S+)", out))
        ranks = sorted(int(r) for r, _ in sums)
        if ranks != list(range(2 * slots)) or len({c for _, c in sums}) != 1:
            fail("fixed job: expected equal checksums from ranks 0..%d: %s" % (2 * slots - 1,
                                                                             sorted(sums)))

        out = run(localize(elastic, os.path.abspath(args.tuttirun), sshd, etc_mpi), env)
        sums = re.findall(r"rank \d+: parameter checksum (\S+)", out)
        if len(sums) != 2 * elastic_spec["slotsPerWorker"] or len(set(sums)) != 1:
            fail("elastic job: expected %d equal checksums: %s"
                 % (2 * elastic_spec["slotsPerWorker"], sums))
    finally:
        if sshd:
            sshd.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS: MPI Operator manifests and Dockerfile; fixed and elastic launcher commands")
    return 0


if __name__ == "__main__":
    sys.exit(main())
