#!/usr/bin/env python3
"""Integration tests of tuttirun: real jobs, real processes.

Usage: launcher_tests.py --tuttirun PATH --helper PATH [--allreduce PATH] CASE

Each CASE is one ctest test (see tests/CMakeLists.txt). The helper is
tests/launcher/rendezvous_helper.cc: a rank that reaches the rendezvous
without the tutti runtime. Exit code 0 = pass.
"""
import os
import re
import socket
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job_util import (  # noqa: E402
    check, count_lines, interrupt, processes_with, run_case, run_tuttirun, start_tuttirun,
    wait_exit, wait_gone)

ARGS = None


def tuttirun(args, timeout=60, **kw):
    return run_tuttirun(ARGS.tuttirun, args, timeout, **kw)


def case_output_prefix():
    # Short lines, stderr, a partial last line, and many long lines from
    # every rank at once: each must come out whole, with its prefix.
    script = ('echo "hello $TUTTI_RANK of $TUTTI_SIZE"; echo "oops $TUTTI_RANK" >&2; '
              'i=0; while [ $i -lt 300 ]; do '
              'echo "line-$TUTTI_RANK-$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";'
              ' i=$((i+1)); done; printf "tail-$TUTTI_RANK"')
    rc, out, err, _ = tuttirun(["-np", "4", "sh", "-c", script])
    check(rc == 0, "exit code %d" % rc)
    lines = out.splitlines()
    for r in range(4):
        check("[%d]<stdout>: hello %d of 4" % (r, r) in lines, "hello line of rank %d" % r)
        check("[%d]<stdout>: tail-%d" % (r, r) in lines, "partial last line of rank %d" % r)
        check("[%d]<stderr>: oops %d" % (r, r) in err.splitlines(), "stderr line of rank %d" % r)
        got = [l for l in lines if l.startswith("[%d]<stdout>: line-" % r)]
        want = ["[%d]<stdout>: line-%d-%d-%s" % (r, r, i, "x" * 58) for i in range(300)]
        check(got == want, "rank %d: lines interleaved or lost" % r)
    check(all(re.match(r"^\[\d\]<stdout>: ", l) for l in lines), "an unprefixed stdout line")


def case_output_files():
    with tempfile.TemporaryDirectory() as d:
        rc, out, _, _ = tuttirun(["-np", "2", "--output-filename", d + "/logs", "sh", "-c",
                                  'echo "out $TUTTI_RANK"; echo "err $TUTTI_RANK" >&2'])
        check(rc == 0, "exit code %d" % rc)
        for r in range(2):
            with open("%s/logs/rank.%d/stdout" % (d, r)) as f:
                check(f.read() == "out %d\n" % r, "stdout file of rank %d" % r)
            with open("%s/logs/rank.%d/stderr" % (d, r)) as f:
                check(f.read() == "err %d\n" % r, "stderr file of rank %d" % r)
        check("[1]<stdout>: out 1" in out, "output still goes to stdout too")


def case_rank_exit_code():
    marker = "tutti-exit-" + uuid.uuid4().hex
    rc, _, err, took = tuttirun(["-np", "4", "sh", "-c",
                                 'if [ "$TUTTI_RANK" = 3 ]; then sleep 0.5; exit 3; fi; '
                                 'sleep 60; : ' + marker])
    check(rc == 1, "exit code %d, expected 1" % rc)
    check(took < 10, "took %.1f s" % took)
    check("tuttirun: rank 3 on host localhost exited with code 3" in err, "message naming rank 3")
    check(not wait_gone(marker, 5), "ranks left behind")


def case_ssh_unknown_host():
    # ssh fails (exit 255) before the rank reaches the rendezvous: exit 3.
    rc, _, err, took = tuttirun(["-np", "2", "-H", "nosuchhost.invalid:2", "true"], timeout=60)
    check(rc == 3, "exit code %d, expected 3 (the job could not start)" % rc)
    check("on host nosuchhost.invalid exited with code 255 (ssh failed; see the rank's stderr)"
          " before reaching the rendezvous" in err, "message: %r" % err)
    check(took < 30, "took %.1f s" % took)


def case_rank_sigkill():
    marker = "tutti-kill-" + uuid.uuid4().hex
    rc, _, err, took = tuttirun(["-np", "3", "sh", "-c",
                                 'if [ "$TUTTI_RANK" = 2 ]; then sleep 0.5; kill -9 $$; fi; '
                                 'sleep 60; : ' + marker])
    check(rc == 1, "exit code %d, expected 1" % rc)
    check(took < 10, "took %.1f s" % took)
    check("rank 2 on host localhost was killed by signal 9 (SIGKILL)" in err, "message")
    check(not wait_gone(marker, 5), "ranks left behind")


def case_stopped_rank():
    """A rank stopped by SIGSTOP ends with the job: tuttirun continues it after
    the SIGTERM, so it does not wait for the SIGKILL after the 5 s grace."""
    marker = "tutti-stopped-" + uuid.uuid4().hex
    rc, _, err, took = tuttirun(["-np", "2", "sh", "-c",
                                 'if [ "$TUTTI_RANK" = 1 ]; then kill -STOP $$; fi; '
                                 'sleep 1; exit 3; : ' + marker])
    check(rc == 1, "exit code %d, expected 1" % rc)
    check(took < 4, "took %.1f s: the stopped rank waited for the SIGKILL" % took)
    check("sending SIGKILL" not in err, "the stopped rank needed the SIGKILL:\n" + err)
    check(not wait_gone(marker, 5), "ranks left behind")


def case_sigint_cleanup():
    marker = "tutti-sigint-" + uuid.uuid4().hex
    # Every rank starts a grandchild; rank 1 ignores SIGINT and SIGTERM, so
    # only the SIGKILL after the grace period stops it.
    script = ('(sleep 300; : %s-child) & '
              'if [ "$TUTTI_RANK" = 1 ]; then trap "" INT TERM; fi; '
              'echo ready; while :; do sleep 1; done; : %s' % (marker, marker))
    p = start_tuttirun(ARGS.tuttirun, ["-np", "4", "sh", "-c", script])
    check(count_lines(p, "ready", 4, 30) == 4, "ranks did not start")
    check(len(processes_with(marker)) >= 8, "expected ranks and grandchildren")
    start = time.monotonic()
    out, err = interrupt(p)
    took = time.monotonic() - start
    print("rc=%d after %.1f s\n%s%s" % (p.returncode, took, out, err))
    check(p.returncode == 130, "exit code %d, expected 130" % p.returncode)
    check("received SIGINT" in err, "message about SIGINT")
    left = processes_with(marker)
    check(not left, "processes of the job left after tuttirun exited: %s" % left)


def case_start_timeout():
    marker = "tutti-timeout-" + uuid.uuid4().hex
    script = ('if [ "$TUTTI_RANK" -lt 2 ]; then exec "%s" 60; fi; sleep 60; : %s'
              % (ARGS.helper, marker))
    rc, out, err, took = tuttirun(["-np", "4", "--start-timeout", "3", "sh", "-c", script])
    check(rc == 4, "exit code %d, expected 4" % rc)
    check("ranks 2, 3 did not reach the rendezvous within 3 s" in err, "message naming ranks 2, 3")
    check("[0]<stdout>: rank 0 reached the rendezvous" in out, "rank 0 reached it")
    check(took < 15, "took %.1f s" % took)
    check(not wait_gone(marker, 5), "ranks left behind")


def case_garbage_rendezvous():
    # Ranks wait 2 s before they connect; meanwhile a stranger sends garbage.
    p = start_tuttirun(ARGS.tuttirun, ["-np", "2", "--verbose", "sh", "-c",
                                       'sleep 2; exec "%s" 0' % ARGS.helper])
    port = None
    err_lines = []
    while port is None:
        line = p.stderr.readline()
        if not line:
            break
        err_lines.append(line)
        m = re.search(r"rendezvous server on port (\d+)", line)
        if m:
            port = int(m.group(1))
    check(port is not None, "no port in --verbose output")
    silent = socket.create_connection(("127.0.0.1", port))
    for payload in [os.urandom(4096), b"GET / HTTP/1.0\r\n\r\n", b"\xff" * 16,
                    b"\x00\x00\x00\x10short", b"\x7f\xff\xff\xff" + b"A" * 64]:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(payload)
            s.settimeout(1)
            try:
                s.recv(1024)
            except (socket.timeout, OSError):
                pass
            s.close()
        except OSError as e:
            print("garbage connection: %s" % e)
    out, err = wait_exit(p, 60, "the job did not complete")
    silent.close()
    print("rc=%d\n%s%s%s" % (p.returncode, out, "".join(err_lines), err))
    check(p.returncode == 0, "exit code %d" % p.returncode)
    for r in range(2):
        check("[%d]<stdout>: rank %d reached the rendezvous" % (r, r) in out, "rank %d" % r)


def case_bad_flags():
    with tempfile.TemporaryDirectory() as d:
        witness = d + "/started"
        cmd = ["sh", "-c", "touch " + witness]
        hostfile = d + "/hosts"
        with open(hostfile, "w") as f:
            f.write("# hosts\nlocalhost slots=2\nother slots=two\n")
        for args, says in [
                (["-np", "2", "--cycle-time-ms", "-1"], "--cycle-time-ms -1: expected a number in [0, 10000]"),
                (["-np", "2", "--fusion-threshold-mb", "x"], "--fusion-threshold-mb x: expected a number in [0, "),
                (["-np", "2", "--backend", "gloo"], "--backend gloo: expected one of {auto,tcp,mpi,nccl}"),
                (["--hostfile", hostfile], hostfile + ":3:"),
                (["-np", "3", "-H", "localhost:2"], "-np 3 but the hosts have only 2 slots"),
                (["-np", "2", "-x", "TUTTI_TEST_UNSET_VAR"], "-x TUTTI_TEST_UNSET_VAR"),
                (["-np", "2", "--network-interface", "nosuch0"], "--network-interface nosuch0")]:
            rc, _, err, _ = tuttirun(args + cmd, timeout=20)
            check(rc == 2, "%s: exit code %d, expected 2" % (args, rc))
            check(says in err, "%s: error should say %r" % (args, says))
            check(not os.path.exists(witness), "%s: a rank was started" % args)
        rc, _, err, _ = tuttirun(["-np", "1", "sh", "-c", "exit 0"],
                                 env=dict(os.environ, TUTTI_CACHE_CAPACITY="-3"))
        check(rc == 2 and "TUTTI_CACHE_CAPACITY=-3" in err, "bad inherited TUTTI_ variable")
        rc, out, _, _ = tuttirun(["--check-build"])
        check(rc == 0 and "[X] tcp" in out, "--check-build")
        if "[ ] mpi" in out:
            rc, _, err, _ = tuttirun(["-np", "2", "--mpi"] + cmd, timeout=20)
            check(rc == 2 and "this build has no MPI backend" in err, "--mpi without MPI")
            check(not os.path.exists(witness), "--mpi without MPI: a rank was started")
        rc, out, _, _ = tuttirun(["--help"])
        check(rc == 0 and "Exit codes" in out, "--help")


def case_local_host_names():
    # localhost, 127.0.0.1 and this machine's name are one host: local ranks
    # 0..3 of 4, one cross rank (not two hosts each with a local rank 0).
    hosts = "localhost:2,127.0.0.1:1,%s:1" % socket.gethostname()
    rc, out, _, _ = tuttirun(["-H", hosts, "sh", "-c",
                              'echo "placement $TUTTI_LOCAL_RANK/$TUTTI_LOCAL_SIZE '
                              '$TUTTI_CROSS_RANK/$TUTTI_CROSS_SIZE"'])
    check(rc == 0, "exit code %d" % rc)
    for r in range(4):
        want = "[%d]<stdout>: placement %d/4 0/1" % (r, r)
        check(want in out.splitlines(), "missing %r in %r" % (want, out))


def fake_mpirun(tmp, body):
    """A directory for PATH whose `mpirun` is a shell script running `body`."""
    path = os.path.join(tmp, "mpirun")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, 0o755)
    return dict(os.environ, PATH=tmp + os.pathsep + os.environ["PATH"])


def case_mpirun_stuck():
    """tuttirun --mpi stops a mpirun that stays after every rank reported
    leaving without MPI_Finalize (SIGTERM, SIGKILL 5 s later) and exits with
    the ranks' status, or 1 s after the MPI_Abort a rank's error announced
    (exit 1); otherwise it exits with mpirun's code (128+N for a
    signal). mpirun here is a script in PATH."""
    rc, out, _, _ = tuttirun(["--check-build"])
    if "[X] mpi" not in out:
        print("SKIP: this build has no MPI backend")
        sys.exit(77)
    marker = "tutti-stuck-mpirun-" + uuid.uuid4().hex
    notice = ("[1,%d]<stderr>:[tutti WARNING rank %d] rank %d: MPI_Finalize did not return within "
              "5 s after every rank had finished (x); leaving with exit status %d without it")
    with tempfile.TemporaryDirectory() as tmp:
        body = "trap '' TERM\n" + "".join(
            "echo '%s' >&2\n" % (notice % (r, r, r, 3 if r == 1 else 0)) for r in range(2))
        env = fake_mpirun(tmp, body + "exec sh -c \"trap '' TERM; while :; do sleep 1; done\" "
                          + marker)
        rc, _, err, took = tuttirun(["--mpi", "-np", "2", "true"], env=env, timeout=60)
        check(rc == 3, "exit code %d, expected rank 1's 3" % rc)
        check(err.count("MPI_Finalize did not return") == 2, "notices not passed through:\n" + err)
        check("stopping it (SIGTERM" in err and "sending SIGKILL" in err, "no stop:\n" + err)
        check(6.5 <= took < 30, "took %.1f s: expected 2 s, then SIGTERM, SIGKILL 5 s later" % took)
        check(not wait_gone(marker, 5), "the fake mpirun was left running")
        # One notice of two: mpirun is not stopped; its own end is tuttirun's.
        env = fake_mpirun(tmp, "echo '%s' >&2\nsleep 3\nexit 7" % (notice % (0, 0, 0, 0)))
        rc, _, err, took = tuttirun(["--mpi", "-np", "2", "true"], env=env, timeout=60)
        check(rc == 7 and "stopping it" not in err and took >= 3, "mpirun's exit code 7: %d" % rc)
        # A timed-out MPI wait's error ("MPI_Abort in 2 s"): a mpirun still
        # there 1 s after that is stopped too, exit code 1.
        abort = ("[1,0]<stderr>:[tutti ERROR rank 0] rank 0: MPI_Iallreduce on the global process "
                 "set (ranks 0-1) made no progress for 5 s (TUTTI_TIMEOUT_SECONDS): a rank of it "
                 "hangs or is stopped; Open MPI cannot cancel the call, so this job ends with "
                 "MPI_Abort in 2 s")
        env = fake_mpirun(tmp, "trap '' TERM\necho '%s' >&2\n" % abort
                          + "exec sh -c \"trap '' TERM; while :; do sleep 1; done\" " + marker)
        rc, _, err, took = tuttirun(["--mpi", "-np", "2", "true"], env=env, timeout=60)
        check(rc == 1, "after an abort notice: exit code %d, expected 1" % rc)
        check("job is ending with MPI_Abort" in err and "sending SIGKILL" in err, "no stop:\n" + err)
        check(7.5 <= took < 30, "took %.1f s: expected 3 s, then SIGTERM, SIGKILL 5 s later" % took)
        check(not wait_gone(marker, 5), "the fake mpirun was left running")
        env = fake_mpirun(tmp, "kill -USR1 $$")
        rc, _, err, _ = tuttirun(["--mpi", "-np", "2", "true"], env=env, timeout=60)
        check(rc == 128 + 10, "mpirun killed by SIGUSR1: exit code %d, expected 138" % rc)


def case_allreduce_np4():
    check(ARGS.allreduce, "--allreduce not given")
    rc, out, err, _ = tuttirun(["-np", "4", ARGS.allreduce], timeout=280)
    check(rc == 0, "exit code %d" % rc)
    for line in out.splitlines():
        check(re.match(r"^\[[0-3]\]<stdout>: ", line), "unprefixed line %r" % line)


if __name__ == "__main__":
    run_case(globals(), "--allreduce")
