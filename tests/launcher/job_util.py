"""What the process-level tests of tuttirun share (tests/launcher/*_tests.py,
tests/elastic/elastic_tests.py): failing with a message, running tuttirun to
completion or interrupting it, finding processes left behind."""
import argparse
import signal
import subprocess
import sys
import time


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def run_tuttirun(tuttirun, args, timeout=60, **kw):
    """Runs tuttirun to completion; prints and returns (rc, stdout, stderr, seconds)."""
    start = time.monotonic()
    p = subprocess.run([tuttirun] + args, capture_output=True, text=True, timeout=timeout, **kw)
    took = time.monotonic() - start
    print("$ tuttirun " + " ".join(args), flush=True)
    print("rc=%d in %.1f s\n--- stdout\n%s--- stderr\n%s" % (p.returncode, took, p.stdout,
                                                            p.stderr), flush=True)
    return p.returncode, p.stdout, p.stderr, took


def run_logged(cmd, env, timeout):
    """Runs `cmd` (any launcher) to completion with stdin closed, printing the
    command and its combined output; returns (rc, output). Fails when it does
    not finish within `timeout` seconds."""
    print("+ " + " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        print(e.stdout or "")
        fail("%s did not finish within %d s" % (cmd[0], timeout))
    print(p.stdout, flush=True)
    return p.returncode, p.stdout


def start_tuttirun(tuttirun, args):
    """Starts tuttirun in the background with stdout and stderr piped (text)."""
    return subprocess.Popen([tuttirun] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def count_lines(p, token, wanted, seconds):
    """Reads p's stdout until `wanted` lines contain `token`, it ends, or
    `seconds` pass; returns how many did."""
    seen = 0
    deadline = time.monotonic() + seconds
    while seen < wanted and time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        seen += token in line
    return seen


def wait_exit(p, timeout, message):
    """Waits for a started tuttirun; returns (stdout, stderr). Kills it and
    fails with `message` when it does not exit within `timeout` seconds."""
    try:
        return p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        fail(message)


def interrupt(p, timeout=30):
    """SIGINTs a started tuttirun and waits for it (wait_exit)."""
    p.send_signal(signal.SIGINT)
    return wait_exit(p, timeout, "tuttirun did not exit after SIGINT")


def processes_with(marker):
    """`ps` lines of the processes whose command line contains `marker`."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if marker in l and "ps -eo" not in l]


def wait_gone(marker, seconds):
    """Waits until no process has `marker`; returns those still there."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not processes_with(marker):
            return []
        time.sleep(0.2)
    return processes_with(marker)


def run_case(namespace, *options):
    """Parses --tuttirun, --helper, `options` (extra --flags) and CASE, stores the
    arguments as namespace["ARGS"] (the cases read it), runs namespace's case_<CASE>()
    and prints PASS."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--tuttirun", required=True)
    parser.add_argument("--helper", required=True)
    for option in options:
        parser.add_argument(option)
    parser.add_argument("case")
    args = parser.parse_args()
    namespace["ARGS"] = args
    fn = namespace.get("case_" + args.case)
    if fn is None:
        fail("unknown case " + args.case)
    fn()
    print("PASS: " + args.case)
