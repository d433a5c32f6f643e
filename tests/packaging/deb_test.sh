#!/bin/bash
# Debian packages and the consumers of an installed tutti:
#   1. a build configured with prefix /usr (build-deb/, CUDA off, no tests;
#      ccache makes it a relink after scripts/build);
#   2. `cpack -G DEB`: libtutti0, libtutti-dev, tutti-bin, python3-tutti with
#      their Depends and files in Debian's places (lib/x86_64-linux-gnu,
#      /usr/lib/python3/dist-packages);
#   3. a staged install (DESTDIR, prefix /usr): a C program built with
#      pkg-config and one built with find_package(tutti), each run as a 2-rank
#      job under the staged tuttirun;
#   4. the unpacked python3-tutti + libtutti0 run a 2-rank training job.
#   tests/packaging/deb_test.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$root/tests/packaging"
build="$root/build-deb"
tmp=$(mktemp -d /tmp/tutti-deb-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
libdir="usr/lib/$multiarch"

echo "+ configure and build $build (prefix /usr)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_INSTALL_PREFIX=/usr -DTUTTI_BUILD_TESTS=OFF \
  -DTUTTI_WITH_CUDA=OFF >"$tmp/configure.log" || { cat "$tmp/configure.log"; fail "configure"; }
cmake --build "$build" -j 2 >"$tmp/build.log" || { tail -50 "$tmp/build.log"; fail "build"; }

echo "+ cpack -G DEB"
(cd "$build" && cpack -G DEB -B "$tmp/debs" >"$tmp/cpack.log") || { cat "$tmp/cpack.log"; fail "cpack"; }
deb() { ls "$tmp/debs/$1"_*.deb 2>/dev/null | head -1; }
for p in libtutti0 libtutti-dev tutti-bin python3-tutti; do
  [ -n "$(deb $p)" ] || { ls "$tmp/debs"; fail "no package $p"; }
  echo "--- $p"; dpkg-deb -f "$(deb $p)" Package Version Architecture Depends
done
field() { dpkg-deb -f "$(deb "$1")" "$2"; }
field libtutti0 Depends | grep -q 'libsodium23' || fail "libtutti0 does not depend on libsodium23"
field libtutti0 Depends | grep -q 'libstdc++6' || fail "libtutti0 does not depend on libstdc++6"
field tutti-bin Depends | grep -q 'libsodium23' || fail "tutti-bin does not depend on libsodium23"
[ "$(field libtutti-dev Depends)" = "libtutti0 (= 0.1.0-1)" ] || fail "libtutti-dev Depends"
field python3-tutti Depends | grep -q 'python3' || fail "python3-tutti does not depend on python3"
field python3-tutti Depends | grep -q 'libtutti0' || fail "python3-tutti does not depend on libtutti0"
[ "$(field python3-tutti Architecture)" = all ] || fail "python3-tutti is not Architecture: all"
# grep without -q reads the whole listing: with pipefail, a grep -q that stops
# at the first match can leave dpkg-deb to die of SIGPIPE (a long package list).
has() { dpkg-deb -c "$(deb "$1")" | awk '{print $6}' | grep -x "./$2" >/dev/null || fail "$1 has no /$2"; }
has libtutti0 "$libdir/libtutti.so.0"
has libtutti-dev "$libdir/libtutti.so"
has libtutti-dev "usr/include/tutti.h"
has libtutti-dev "usr/include/tutti_completion.h"
has libtutti-dev "usr/include/tutti_p2p.h"
has libtutti-dev "$libdir/pkgconfig/tutti.pc"
has libtutti-dev "$libdir/cmake/tutti/tuttiConfig.cmake"
has tutti-bin "usr/bin/tuttirun"
has python3-tutti "usr/lib/python3/dist-packages/tutti/torch/__init__.py"
if dpkg-deb -c "$(deb libtutti0)" | grep 'include/' >/dev/null; then fail "libtutti0 holds headers"; fi

echo "+ staged install (DESTDIR, prefix /usr)"
stage="$tmp/stage"
DESTDIR="$stage" cmake --install "$build" >/dev/null
export LD_LIBRARY_PATH="$stage/$libdir"
export TUTTI_TIMEOUT_SECONDS=30
run_job() {
  "$stage/usr/bin/tuttirun" -np 2 "$@" >"$tmp/job.out" 2>&1 || { cat "$tmp/job.out"; fail "job $*"; }
  [ "$(grep -c 'rank [01]/2: OK' "$tmp/job.out")" = 2 ] || { cat "$tmp/job.out"; fail "not OK: $*"; }
}
export PKG_CONFIG_PATH="$stage/$libdir/pkgconfig"
flags=$(pkg-config --cflags --libs tutti)
echo "pkg-config: $flags"
incdir=$(pkg-config --variable=includedir tutti)
pclibdir=$(pkg-config --variable=libdir tutti)
[ "$(realpath "$incdir")" = "$stage/usr/include" ] || fail "pkg-config includedir $incdir"
[ "$(realpath "$pclibdir")" = "$stage/$libdir" ] || fail "pkg-config libdir $pclibdir"
cc -std=c99 -o "$tmp/pc_consumer" "$root/examples/c/allreduce.c" $flags
run_job "$tmp/pc_consumer"
cmake -S "$here/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$stage/usr" \
  -DTUTTI_EXAMPLE_SOURCE="$root/examples/c/allreduce.c" >"$tmp/consumer.log" \
  || { cat "$tmp/consumer.log"; fail "find_package consumer: configure"; }
cmake --build "$tmp/consumer" >>"$tmp/consumer.log" || { cat "$tmp/consumer.log"; fail "consumer build"; }
run_job "$tmp/consumer/cmake_consumer"

echo "+ python3-tutti and libtutti0, unpacked"
dpkg-deb -x "$(deb python3-tutti)" "$tmp/root"
dpkg-deb -x "$(deb libtutti0)" "$tmp/root"
cp "$here/train_check.py" "$tmp/"
(cd "$tmp" && env -u TUTTI_LIBRARY PYTHONPATH="$tmp/root/usr/lib/python3/dist-packages" \
   LD_LIBRARY_PATH="$tmp/root/$libdir" "$stage/usr/bin/tuttirun" -np 2 /usr/bin/python3 \
   train_check.py) >"$tmp/py.out" 2>&1 || { cat "$tmp/py.out"; fail "python3-tutti job"; }
cat "$tmp/py.out"
[ "$(grep -c "library .*libtutti.so.0" "$tmp/py.out")" = 2 ] || fail "python3-tutti did not load libtutti.so.0"
[ "$(grep -o 'parameters .*' "$tmp/py.out" | sort -u | wc -l)" = 1 ] || fail "parameters differ"
echo "PASS: Debian packages, pkg-config and find_package consumers, python3-tutti"
