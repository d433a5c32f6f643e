#!/usr/bin/env python3
"""Process tests of tuttirun's elastic driver and --rsh-agent (docs/elastic.md).

Usage: elastic_tests.py --tuttirun PATH --helper PATH CASE

Workers are tests/launcher/fake_elastic_worker.py: they join generations
through the rendezvous store (with the helper) and print what they joined.
Hosts h1, h2, ... are this machine, reached through the rsh agent
`env TUTTI_FAKE_HOST={host}`. Exit code 0 = pass.
"""
import os
import re
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job_util import (  # noqa: E402
    check, count_lines, fail, interrupt, run_case, run_tuttirun, start_tuttirun, wait_exit,
    wait_gone)

ARGS = None
HERE = os.path.dirname(os.path.abspath(__file__))
AGENT = ["--rsh-agent", "env TUTTI_FAKE_HOST={host}", "--network-interface", "lo"]


def worker(*opts, marker=None):
    """The fake worker's command line; `marker` makes its processes findable."""
    cmd = ["/usr/bin/python3", os.path.join(HERE, "fake_elastic_worker.py"),
           "--helper", ARGS.helper] + list(opts)
    return cmd + (["--marker", marker] if marker else [])


def tuttirun(args, timeout=60, **kw):
    return run_tuttirun(ARGS.tuttirun, args, timeout, **kw)


def write_script(path, body):
    """An executable shell script at `path` ("#!/bin/sh" and `body`); returns path."""
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body)
    os.chmod(path, 0o755)
    return path


def joined(out):
    """{worker id: [(g, rank, size, local, cross, host), ...]} from the workers' lines."""
    got = {}
    for m in re.finditer(r"^\[(\d+)\]<stdout>: joined g=(\d+) rank=(\d+) size=(\d+) "
                         r"local=(\S+) cross=(\S+) host=(\S+) fake=(\S+)$", out, re.M):
        w = int(m.group(1))
        check(m.group(7) == m.group(8) or m.group(8) == "local",
              "worker %d runs on %s but its members line says %s" % (w, m.group(8), m.group(7)))
        got.setdefault(w, []).append((int(m.group(2)), int(m.group(3)), int(m.group(4)),
                                      m.group(5), m.group(6), m.group(7)))
    return got


def case_worker_fails():
    # Worker 3 (on h2) fails in generation 0: h2 is blacklisted, worker 2 is
    # stopped, generation 1 is workers 0 and 1 on h1, and the job ends with 0.
    marker = "tutti-elastic-" + uuid.uuid4().hex
    rc, out, err, took = tuttirun(["-np", "4", "--min-np", "2", "-H", "h1:2,h2:2"] + AGENT +
                                  worker("--fail", "3:1", "--done-at", "1", marker=marker))
    check(rc == 0, "exit code %d" % rc)
    j = joined(out)
    check(j.get(0) == [(0, 0, 4, "0/2", "0/2", "h1"), (1, 0, 2, "0/2", "0/1", "h1")],
          "worker 0: %s" % j.get(0))
    check(j.get(1) == [(0, 1, 4, "1/2", "0/2", "h1"), (1, 1, 2, "1/2", "0/1", "h1")],
          "worker 1: %s" % j.get(1))
    check(j.get(2) == [(0, 2, 4, "0/2", "1/2", "h2")], "worker 2: %s" % j.get(2))
    check(j.get(3) == [(0, 3, 4, "1/2", "1/2", "h2")], "worker 3: %s" % j.get(3))
    for says in ["tuttirun: elastic: generation 0: 4 workers (ids 0, 1, 2, 3 on h1:2,h2:2)",
                 "tuttirun: elastic: worker 3 (rank 3 of generation 0) on host h2 exited with code 1",
                 "tuttirun: elastic: host h2 blacklisted for the rest of the job; stopping its "
                 "workers (ids 2)",
                 "tuttirun: elastic: generation 1: 2 workers (ids 0, 1 on h1:2)"]:
        check(says in err, "stderr should say %r" % says)
    check("generation 2" not in err, "a third generation")
    check(took < 15, "took %.1f s" % took)
    check(not wait_gone(marker, 5), "workers left behind")


def case_report_lost():
    # Worker 0 reports rank 3 lost (its process lives on: a cut link). The
    # driver stops it and the rest of h2, and goes on with h1.
    marker = "tutti-elastic-" + uuid.uuid4().hex
    rc, out, err, took = tuttirun(["-np", "4", "--min-np", "2", "-H", "h1:2,h2:2"] + AGENT +
                                  worker("--report", "0:3:0", "--done-at", "1", "--hold", "0.5",
                                         marker=marker))
    check(rc == 0, "exit code %d" % rc)
    check("worker 0 reports rank 3 of generation 0 (worker 3 on host h2) lost" in err,
          "message about the report")
    check("generation 1: 2 workers (ids 0, 1 on h1:2)" in err, "generation 1")
    j = joined(out)
    check([g[0] for g in j.get(0, [])] == [0, 1], "worker 0 joined %s" % j.get(0))
    # Worker 3 may be stopped before it even printed its join (worker 0
    # reports at once): it must never be in a later generation.
    check([g[0] for g in j.get(3, [])] in ([], [0]), "worker 3 joined %s" % j.get(3))
    check(took < 15, "took %.1f s" % took)
    check(not wait_gone(marker, 5), "workers left behind")


def case_min_np_timeout():
    # One of two workers fails; --min-np 2 cannot be met: after
    # --elastic-timeout the job fails naming the capacity, and the waiting
    # worker reads elastic/failed.
    marker = "tutti-elastic-" + uuid.uuid4().hex
    rc, out, err, took = tuttirun(["-np", "2", "--min-np", "2", "--elastic-timeout", "2",
                                   "-H", "h1:1,h2:1"] + AGENT +
                                  worker("--fail", "1:1", "--done-at", "9", marker=marker))
    msg = ("elastic: 1 worker possible (hosts h1:1; blacklisted: h2), --min-np 2 needs 2; gave up "
           "after 2 s (--elastic-timeout)")
    check(rc == 1, "exit code %d, expected 1" % rc)
    check("tuttirun: " + msg in err, "the failure message")
    check("waiting up to 2 s (--elastic-timeout)" in err, "the waiting message")
    check("[0]<stdout>: failed: tuttirun: " + msg in out, "worker 0 did not see elastic/failed")
    check(2 <= took < 10, "took %.1f s" % took)
    check(not wait_gone(marker, 5), "workers left behind")


def case_reset_limit():
    marker = "tutti-elastic-" + uuid.uuid4().hex
    rc, out, err, took = tuttirun(["-np", "3", "--min-np", "1", "--reset-limit", "1",
                                   "-H", "h1:1,h2:1,h3:1"] + AGENT +
                                  worker("--fail", "2:1:0", "--fail", "1:4:1", "--done-at", "9",
                                         marker=marker))
    msg = ("elastic: --reset-limit 1 reached: 1 reset done, and another is needed (worker 1 "
           "(rank 1 of generation 1) on host h2 exited with code 4); giving up")
    check(rc == 1, "exit code %d, expected 1" % rc)
    check("tuttirun: " + msg in err, "the failure message")
    check("generation 1: 2 workers (ids 0, 1 on h1:1,h2:1)" in err, "generation 1")
    check(took < 15, "took %.1f s" % took)
    check(not wait_gone(marker, 5), "workers left behind")


def case_discovery_first_run_fails():
    with tempfile.TemporaryDirectory() as d:
        witness = d + "/started"
        script = write_script(d + "/discover.sh", "echo 'no cluster today' >&2\nexit 3\n")
        rc, _, err, _ = tuttirun(["-np", "2", "--host-discovery-script", script,
                                  "sh", "-c", "touch " + witness], timeout=30)
        check(rc == 3, "exit code %d, expected 3" % rc)
        check("tuttirun: elastic: the first host discovery failed: --host-discovery-script %s "
              "exited with code 3 (stderr: no cluster today)" % script in err, "message")
        check(not os.path.exists(witness), "a worker was started")


def case_discovery_adds_and_removes():
    # Discovery lists h1:2; the test adds h2:2 (workers 2, 3 join generation
    # 1 after the survivors), breaks the script once (logged, list kept), then
    # removes h1 (workers 0, 1 stopped, not blacklisted): generation 2 is 2, 3.
    marker = "tutti-elastic-" + uuid.uuid4().hex
    with tempfile.TemporaryDirectory() as d:
        hosts = d + "/hosts"
        with open(hosts, "w") as f:
            f.write("h1:2\n")
        script = write_script(d + "/discover.sh",
                              "if grep -q FAIL %s; then echo broken >&2; exit 1; fi\ncat %s\n"
                              % (hosts, hosts))
        p = start_tuttirun(ARGS.tuttirun, ["--min-np", "2", "--max-np", "4",
                                           "--host-discovery-script", script] + AGENT +
                           worker("--done-at", "2", "--hold", "0.5", marker=marker))
        err_lines = []

        def wait_for(text, seconds=15):
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                line = p.stderr.readline()
                if not line:
                    break
                err_lines.append(line)
                print(line, end="", flush=True)
                if text in line:
                    return
            p.kill()
            fail("no %r on stderr" % text)

        wait_for("generation 0: 2 workers (ids 0, 1 on h1:2)")
        with open(hosts, "w") as f:
            f.write("h1:2\nh2:2\n")
        wait_for("generation 1: 4 workers (ids 0, 1, 2, 3 on h1:2,h2:2)")
        with open(hosts, "w") as f:
            f.write("FAIL\n")
        wait_for("host discovery failed, keeping the last list: --host-discovery-script %s "
                 "exited with code 1 (stderr: broken)" % script)
        with open(hosts, "w") as f:
            f.write("h2:2\n")
        wait_for("generation 2: 2 workers (ids 2, 3 on h2:2)")
        out, err = wait_exit(p, 30, "the job did not end")
        print("rc=%d\n%s%s" % (p.returncode, out, err))
        check(p.returncode == 0, "exit code %d" % p.returncode)
        check("host discovery added h2:2" in "".join(err_lines), "added message")
        check("blacklisted" not in "".join(err_lines) + err, "a removed host was blacklisted")
        j = joined(out)
        check(j.get(2) == [(1, 2, 4, "0/2", "1/2", "h2"), (2, 0, 2, "0/2", "0/1", "h2")],
              "worker 2: %s" % j.get(2))
        check([g[0] for g in j.get(0, [])] == [0, 1], "worker 0: %s" % j.get(0))
        check(not wait_gone(marker, 5), "workers left behind")


def case_host_added_after_last_commit():
    # The job runs on h1:1; discovery adds h2:1 while worker 0 holds its
    # final state: generation 1 (workers 0, 1) is published, but worker 0
    # exits 0 from generation 0 without joining it. Worker 1, waiting for
    # generation 1's members (--meet), is stopped; the job ends with 0 at once
    # instead of after the newcomer's --elastic-timeout.
    marker = "tutti-elastic-" + uuid.uuid4().hex
    with tempfile.TemporaryDirectory() as d:
        hosts = d + "/hosts"
        with open(hosts, "w") as f:
            f.write("h1:1\n")
        script = write_script(d + "/discover.sh", "cat %s\n" % hosts)
        start = time.monotonic()
        p = start_tuttirun(ARGS.tuttirun, ["--min-np", "1", "--elastic-timeout", "20",
                                           "--host-discovery-script", script] + AGENT +
                           worker("--done-at", "0", "--hold", "4", "--meet", marker=marker))
        err_lines = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            line = p.stderr.readline()
            if not line:
                break
            err_lines.append(line)
            if "generation 0: 1 worker (ids 0 on h1:1)" in line:
                with open(hosts, "w") as f:
                    f.write("h1:1\nh2:1\n")
                break
        out, err = wait_exit(p, 60, "the job did not end")
        took = time.monotonic() - start
        err = "".join(err_lines) + err
        print("rc=%d in %.1f s\n%s%s" % (p.returncode, took, out, err))
        check("generation 1: 2 workers (ids 0, 1 on h1:1,h2:1)" in err,
              "generation 1 was not published while worker 0 held")
        check(p.returncode == 0, "exit code %d" % p.returncode)
        check("tuttirun: elastic: worker 0 (rank 0 of generation 0) on host h1 exited with code "
              "0: the job is finishing (no new generation); stopping the workers outside "
              "generation 0 (ids 1)" in err, "the finishing message")
        check(took < 12, "took %.1f s" % took)
        check([g[0] for g in joined(out).get(0, [])] == [0], "worker 0: %s" % joined(out).get(0))
        check(not wait_gone(marker, 5), "workers left behind")


def case_blacklist_cooldown():
    # h2's worker fails; with --blacklist-cooldown-range 1 1 h2 comes back a
    # second later with a new worker (id 2), which joins generation 2.
    marker = "tutti-elastic-" + uuid.uuid4().hex
    rc, out, err, took = tuttirun(["-np", "2", "--min-np", "1", "--max-np", "2",
                                   "--blacklist-cooldown-range", "1", "1",
                                   "-H", "h1:1,h2:1"] + AGENT +
                                  worker("--fail", "1:1", "--done-at", "2", marker=marker))
    check(rc == 0, "exit code %d" % rc)
    for says in ["host h2 blacklisted for 1 s (failure 1)",
                 "generation 1: 1 worker (ids 0 on h1:1)",
                 "host h2 may run workers again (blacklist cooldown over)",
                 "generation 2: 2 workers (ids 0, 2 on h1:1,h2:1)"]:
        check(says in err, "stderr should say %r" % says)
    check(joined(out).get(2) == [(2, 1, 2, "0/1", "1/2", "h2")], "worker 2 joined generation 2")
    check(took < 15, "took %.1f s" % took)
    check(not wait_gone(marker, 5), "workers left behind")


def case_elastic_sigint():
    marker = "tutti-elastic-" + uuid.uuid4().hex
    p = start_tuttirun(ARGS.tuttirun, ["-np", "3", "--min-np", "1", "-H", "h1:2,localhost:1"] +
                       AGENT + worker("--done-at", "99", marker=marker))
    check(count_lines(p, "joined g=0", 3, 20) == 3, "workers did not join")
    out, err = interrupt(p)
    print("rc=%d\n%s%s" % (p.returncode, out, err))
    check(p.returncode == 130, "exit code %d, expected 130" % p.returncode)
    check("generation 1" not in err, "a new generation while stopping")
    check(not wait_gone(marker, 5), "workers left behind")


def case_rsh_agent():
    # A fixed-size job through the agent: placement variables, no
    # TUTTI_HOSTNAME, the host's name in the agent; a failing rank stops the
    # job and nothing is left behind.
    marker = "tutti-agent-" + uuid.uuid4().hex
    script = ('echo "on $TUTTI_FAKE_HOST rank $TUTTI_RANK/$TUTTI_SIZE local $TUTTI_LOCAL_RANK '
              'cross $TUTTI_CROSS_RANK hostname=${TUTTI_HOSTNAME-unset}"')
    rc, out, _, _ = tuttirun(["-np", "4", "-H", "h1:2,h2:2"] + AGENT + ["sh", "-c", script])
    check(rc == 0, "exit code %d" % rc)
    for r, host in enumerate(["h1", "h1", "h2", "h2"]):
        want = "[%d]<stdout>: on %s rank %d/4 local %d cross %d hostname=unset" % (
            r, host, r, r % 2, r // 2)
        check(want in out.splitlines(), "line %r" % want)
    rc, _, err, took = tuttirun(["-np", "4", "-H", "h1:2,h2:2"] + AGENT +
                                ["sh", "-c", 'if [ "$TUTTI_RANK" = 3 ]; then sleep 0.5; exit 3; '
                                 'fi; (sleep 60; : %s-child) & sleep 60; : %s' % (marker, marker)])
    check(rc == 1, "exit code %d, expected 1" % rc)
    check("rank 3 on host h2 exited with code 3" in err, "message naming rank 3")
    check(took < 15, "took %.1f s" % took)
    check(not wait_gone(marker, 5), "ranks left behind")


def case_rsh_agent_appends_host():
    with tempfile.TemporaryDirectory() as d:
        agent = write_script(d + "/agent.sh",
                             'host="$1"; shift\nTUTTI_FAKE_HOST="agent-$host" exec "$@"\n')
        rc, out, _, _ = tuttirun(["-np", "2", "-H", "h1,h2", "--rsh-agent", agent,
                                  "--network-interface", "lo", "sh", "-c",
                                  'echo "on $TUTTI_FAKE_HOST"'])
        check(rc == 0, "exit code %d" % rc)
        check("[0]<stdout>: on agent-h1" in out and "[1]<stdout>: on agent-h2" in out, "hosts")


def case_bad_elastic_flags():
    with tempfile.TemporaryDirectory() as d:
        witness = d + "/started"
        cmd = ["sh", "-c", "touch " + witness]
        for args, says in [
                (["-np", "4", "--min-np", "5"], "--min-np 5 exceeds -np 4"),
                (["-np", "4", "--max-np", "2"], "-np 4 exceeds --max-np 2"),
                (["-np", "2", "--reset-limit", "1"], "--reset-limit applies to elastic jobs only"),
                (["-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "4", "2"],
                 "--blacklist-cooldown-range 4 2: expected MIN MAX"),
                (["-np", "2", "--rsh-agent", "'x"], "--rsh-agent ''x': unterminated '")]:
            rc, _, err, _ = tuttirun(args + cmd, timeout=20)
            check(rc == 2, "%s: exit code %d, expected 2" % (args, rc))
            check(says in err, "%s: error should say %r" % (args, says))
            check(not os.path.exists(witness), "%s: a worker was started" % args)


if __name__ == "__main__":
    run_case(globals())
