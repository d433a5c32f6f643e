#!/usr/bin/env bash
# Issue 2's "done when": examples/allreduce_64mib across 4 processes started by
# hand with the TUTTI_* variables (no launcher: rank 0 serves the rendezvous).
# Every rank checks the 64 MiB float32 result itself and exits non-zero if it
# is wrong; this script fails unless all 4 exit 0 within the time limit.
#   allreduce_by_hand.sh PATH/TO/allreduce_64mib
set -u
prog="$1"
n=4
# A free port: bind port 0 and read back what the kernel gave.
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
pids=()
for r in $(seq 0 $((n - 1))); do
  TUTTI_RANK=$r TUTTI_SIZE=$n TUTTI_RENDEZVOUS_ADDR=127.0.0.1 TUTTI_RENDEZVOUS_PORT=$port \
    TUTTI_SECRET=$secret timeout 120 "$prog" > "/tmp/tutti_by_hand.$$.$r.log" 2>&1 &
  pids+=($!)
done
status=0
for r in $(seq 0 $((n - 1))); do
  if ! wait "${pids[$r]}"; then
    echo "rank $r failed:"; status=1
  fi
  sed "s/^/[$r] /" "/tmp/tutti_by_hand.$$.$r.log"
  rm -f "/tmp/tutti_by_hand.$$.$r.log"
done
exit $status
