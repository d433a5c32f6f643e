#!/usr/bin/python3
"""`pip install .` end to end: builds the wheel of the root pyproject.toml
(scikit-build-core from PyPI, CUDA off), installs it into a fresh venv, and
runs `tuttirun -np 2 python train_check.py` from the venv's bin/ with no
TUTTI_LIBRARY and no PYTHONPATH: both ranks must load libtutti from the
venv, the loss must decrease and the parameters must be equal. Then builds
the sdist, builds a wheel from the unpacked sdist and checks that it holds the
same files.

    pip_test.py [--keep]

Compiles with ccache (CMakeLists.txt sets CCACHE_BASEDIR to the source root),
so after scripts/build the wheel builds relink only. Exits non-zero with a
message saying what was wrong.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"
CUDA_OFF = "cmake.define.TUTTI_WITH_CUDA=OFF"


def fail(msg):
    sys.exit("FAIL: " + msg)


def run(cmd, env=None, cwd=None, timeout=900):
    print("+ " + " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        print(e.stdout or "")
        fail("%s did not finish within %d s" % (cmd[0], timeout))
    if p.returncode != 0:
        print(p.stdout)
        fail("%s exited with %d" % (" ".join(cmd[:3]), p.returncode))
    return p.stdout


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if k not in ("TUTTI_LIBRARY", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
           and not k.startswith("TUTTI_")}
    # The main build's compilers (CMake's defaults), not Python's
    # x86_64-linux-gnu-g++: ccache keys on the compiler's name.
    env["CC"] = "cc"
    env["CXX"] = "c++"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_ROOT_USER_ACTION"] = "ignore"
    return env


def venv(path, system_site=False):
    cmd = [PYTHON, "-m", "venv"] + (["--system-site-packages"] if system_site else []) + [path]
    run(cmd)
    return os.path.join(path, "bin")


def build_wheel(tools_bin, source, out_dir, build_dir):
    os.makedirs(out_dir, exist_ok=True)
    run([os.path.join(tools_bin, "pip"), "wheel", "--no-deps", "--no-build-isolation",
         "-w", out_dir, "--config-settings", CUDA_OFF,
         "--config-settings", "build-dir=" + build_dir, source],
        env=clean_env())
    wheels = glob.glob(os.path.join(out_dir, "tutti-*.whl"))
    if len(wheels) != 1:
        fail("expected one wheel in %s, got %s" % (out_dir, wheels))
    return wheels[0]


def wheel_files(path):
    with zipfile.ZipFile(path) as z:
        return sorted(n for n in z.namelist() if ".dist-info/" not in n)


def check_wheel_contents(files):
    for want in ("tutti/libtutti.so", "tutti/__init__.py", "tutti/torch/__init__.py",
                 "tutti/torch/elastic/__init__.py"):
        if want not in files:
            fail("the wheel has no %s: %s" % (want, files))
    if not any(re.match(r"tutti-[^/]+\.data/scripts/tuttirun$", f) for f in files):
        fail("the wheel has no tuttirun script: %s" % files)


def run_job(bin_dir, work):
    shutil.copy(os.path.join(HERE, "train_check.py"), work)
    env = clean_env()
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    out = run([os.path.join(bin_dir, "tuttirun"), "-np", "2", "python", "train_check.py"],
              env=env, cwd=work, timeout=300)
    print(out)
    libs = re.findall(r"rank (\d): library (\S+)", out)
    venv_root = os.path.dirname(bin_dir)
    if sorted(r for r, _ in libs) != ["0", "1"]:
        fail("expected a library line from ranks 0 and 1: %s" % libs)
    for r, lib in libs:
        if not os.path.realpath(lib).startswith(os.path.realpath(venv_root) + os.sep):
            fail("rank %s loaded %s, not the venv's libtutti" % (r, lib))
    params = re.findall(r"rank (\d): parameters (\S+)", out)
    if len(params) != 2 or params[0][1] != params[1][1]:
        fail("parameters differ between the ranks or are missing: %s" % params)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="tutti-pip-test.")
    try:
        # scikit-build-core once, in a tools venv (PyPI); the builds below
        # use it without build isolation.
        tools = venv(os.path.join(tmp, "tools"))
        run([os.path.join(tools, "pip"), "install", "-q", "scikit-build-core>=0.10"],
            env=clean_env())
        wheel = build_wheel(tools, REPO, os.path.join(tmp, "dist"),
                            os.path.join(REPO, "build-wheel"))
        files = wheel_files(wheel)
        check_wheel_contents(files)

        # A fresh venv (system site packages for Debian's torch), the wheel,
        # and a 2-rank job from its bin/.
        job_bin = venv(os.path.join(tmp, "venv"), system_site=True)
        run([os.path.join(job_bin, "pip"), "install", "--no-deps", "--no-index", wheel],
            env=clean_env())
        work = os.path.join(tmp, "work")
        os.mkdir(work)
        run_job(job_bin, work)

        # The sdist builds the same wheel (its build directory one level
        # below its root, as build-wheel/ is below the repository's).
        sdist_dir = os.path.join(tmp, "sdist")
        run([os.path.join(tools, "python"), "-c",
             "import sys; from scikit_build_core.build import build_sdist; "
             "print(build_sdist(sys.argv[1]))", sdist_dir], env=clean_env(), cwd=REPO)
        sdists = glob.glob(os.path.join(sdist_dir, "tutti-*.tar.gz"))
        if len(sdists) != 1:
            fail("expected one sdist, got %s" % sdists)
        with tarfile.open(sdists[0]) as t:
            t.extractall(os.path.join(tmp, "src"))
        src = glob.glob(os.path.join(tmp, "src", "tutti-*"))[0]
        for junk in ("build", "build-wheel", ".ci", "bench/results"):
            if os.path.exists(os.path.join(src, junk)):
                fail("the sdist holds %s" % junk)
        wheel2 = build_wheel(tools, src, os.path.join(tmp, "dist2"),
                             os.path.join(src, "build-wheel"))
        if wheel_files(wheel2) != files:
            fail("the sdist's wheel differs: %s vs %s" % (wheel_files(wheel2), files))
    finally:
        if args.keep:
            print("kept " + tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("PASS: wheel and sdist build; 2-rank job from a fresh venv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
