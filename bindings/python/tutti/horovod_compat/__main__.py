"""python3 -m tutti.horovod_compat [--shadow-real-horovod] script.py [args ...]
python3 -m tutti.horovod_compat [--shadow-real-horovod] -m module [args ...]

Runs the script (or module) as __main__ with Horovod's module names mapped to
tutti's (see tutti.horovod_compat). sys.argv is the script's and its
arguments, as under python3 itself. Exit status 2 with a message for a bad
command line or an installed Horovod that would be shadowed.
"""

import os
import runpy
import sys

from tutti import horovod_compat

USAGE = ("usage: python3 -m tutti.horovod_compat [--shadow-real-horovod] "
         "(script.py | -m module) [args ...]")


def _fail(message):
    sys.stderr.write("tutti.horovod_compat: %s\n%s\n" % (message, USAGE))
    sys.exit(2)


def main(argv):
    shadow = os.environ.get("TUTTI_HOROVOD_COMPAT_SHADOW") == "1"
    if argv and argv[0] == "--shadow-real-horovod":
        shadow, argv = True, argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        _fail("no script given" if not argv else "runs a Horovod script on tutti")
    as_module = argv[0] == "-m"
    if as_module and len(argv) < 2:
        _fail("-m needs a module name")
    try:
        horovod_compat.enable(shadow_real_horovod=shadow)
    except ImportError as e:
        _fail(str(e))
    if as_module:
        sys.argv = [argv[1]] + argv[2:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return
    script = argv[0]
    if not os.path.isfile(script):
        _fail("no such script: %s" % script)
    sys.argv = list(argv)
    # As python3 script.py: the script's directory first on sys.path (after the alias).
    sys.path.insert(1, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
