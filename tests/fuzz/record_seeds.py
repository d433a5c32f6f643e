#!/usr/bin/python3
"""Records the bytes of real tutti jobs and cuts them into fuzz seed corpora.

    tests/fuzz/record_seeds.py --tuttirun build/launcher/tuttirun --out DIR [--np 3]

Runs three np-3 jobs of tests/fuzz/record_job.py under tuttirun (shared
memory on; then shared memory off with TUTTI_COMPRESSION_ZSTD_LEVEL=1 so
that data moves as zstd wire frames on TCP; then with autotune switching
every 6 steps, so that response lists carry its parameters). Every rank reaches the rendezvous server
through a recording TCP proxy, which also rewrites each rank's published
address ("rank/<r>/addr") to a proxy of its own, so that every peer
connection (control and data) is recorded as well. Nothing is decrypted:
tutti's connections are authenticated, not encrypted, so the proxy sees the
plain protocol. The streams are then cut at the documented record
boundaries into DIR/<target>/<n> files, one directory per fuzz target:

  auth              the handshake bytes the peer sent (first byte: 0 = we
                    are the server, 1 = we are the client)
  rendezvous_server a client's request frames after its handshake
  rendezvous_client one request kind (first byte) and the server's reply frame
  hello             the 13-byte hello of each peer connection
  shm_offer         the shared-memory offers
  request_list      RequestList bodies (workers -> rank 0, control channel)
  response_list     ResponseList bodies (rank 0 -> workers)
  zstd_segment      zstd wire segments of the data connections

Exit 1 when a target got no seed (the recording missed a kind of traffic).
PYTHONPATH and TUTTI_LIBRARY as for the Python tests.
"""
import argparse
import asyncio
import hashlib
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
AUTH_C2S, AUTH_S2C = 64, 72  # client: nonce+tag; server: magic+nonce, then tag
HELLO = 13
OFFER = 70
ADDR_KEY = re.compile(rb"(^|/)rank/\d+/addr$")


class Recorder:
    """Asyncio proxies on their own thread; `conns` holds every connection's
    (kind, client->server bytes, server->client bytes)."""

    def __init__(self, record_dir):
        self.record_dir = record_dir
        self.conns = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = None
        threading.Thread(target=self._run, daemon=True).start()
        self.ready.wait()

    def _run(self):
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._rendezvous, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def _pipe(self, reader, writer, buf, rewrite=None):
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if rewrite:
                    data = await rewrite(data)
                buf += data
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            try:
                writer.write_eof()
            except (OSError, RuntimeError):
                writer.close()

    async def _proxy(self, kind, reader, writer, port, rewrite=None):
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        c2s, s2c = bytearray(), bytearray()
        self.conns.append((kind, c2s, s2c))
        await asyncio.gather(self._pipe(reader, up_writer, c2s, rewrite),
                             self._pipe(up_reader, writer, s2c))
        writer.close()
        up_writer.close()

    async def _rendezvous(self, reader, writer):
        with open(os.path.join(self.record_dir, "target_port")) as f:
            port = int(f.read())
        state = {"pending": bytearray(), "skip": AUTH_C2S}

        async def rewrite(data):
            # Pass the handshake through; re-frame requests, rewriting SETs
            # of a rank's address to a proxy of that address.
            out = bytearray()
            if state["skip"]:
                n = min(state["skip"], len(data))
                out += data[:n]
                state["skip"] -= n
                data = data[n:]
            p = state["pending"]
            p += data
            while len(p) >= 4:
                (n,) = struct.unpack_from("<I", p)
                if len(p) < 4 + n:
                    break
                body = bytes(p[4:4 + n])
                del p[:4 + n]
                out += await self._rewrite_frame(body)
            return bytes(out)

        await self._proxy("rendezvous", reader, writer, port, rewrite)

    async def _rewrite_frame(self, body):
        if body[0] == 1:  # SET: u8 op, string key, string value
            (klen,) = struct.unpack_from("<I", body, 1)
            key = body[5:5 + klen]
            (vlen,) = struct.unpack_from("<I", body, 5 + klen)
            value = body[9 + klen:9 + klen + vlen]
            if ADDR_KEY.search(key):
                host, _, port = value.decode().rpartition(":")
                server = await asyncio.start_server(
                    lambda r, w, p=int(port): self._proxy("peer", r, w, p), "127.0.0.1", 0)
                mine = server.sockets[0].getsockname()[1]
                value = ("127.0.0.1:%d" % mine).encode()
                body = body[:5 + klen] + struct.pack("<I", len(value)) + value
        return struct.pack("<I", len(body)) + body


def frames(stream):
    """u32 little-endian length + body frames of a stream (stops at a partial one)."""
    out, at = [], 0
    while at + 4 <= len(stream):
        (n,) = struct.unpack_from("<I", stream, at)
        if n == 0 or at + 4 + n > len(stream):
            break
        out.append(bytes(stream[at + 4:at + 4 + n]))
        at += 4 + n
    return out


def cut(conns, seeds):
    for kind, c2s, s2c in conns:
        c2s, s2c = bytes(c2s), bytes(s2c)
        if len(c2s) >= AUTH_C2S and len(s2c) >= AUTH_S2C:
            seeds["auth"].add(b"\0" + c2s[:AUTH_C2S])
            seeds["auth"].add(b"\1" + s2c[:AUTH_S2C])
        c_rest, s_rest = c2s[AUTH_C2S:], s2c[AUTH_S2C:]
        if kind == "rendezvous":
            if c_rest:
                seeds["rendezvous_server"].add(c_rest[:4096])
            requests = frames(c_rest)
            for req, reply in zip(requests, frames(s_rest)):
                seeds["rendezvous_client"].add(bytes([req[0]]) + struct.pack("<I", len(reply)) + reply)
            continue
        if len(c_rest) < HELLO:
            continue
        hello = c_rest[:HELLO]
        seeds["hello"].add(hello)
        channel = hello[12]
        c_rest = c_rest[HELLO:]
        if channel == 2:  # control: requests from the connecting worker, responses back
            seeds["request_list"].update(frames(c_rest))
            seeds["response_list"].update(frames(s_rest))
            continue
        if len(s_rest) >= OFFER and s_rest[0] in (0, 1) and s_rest[6:13] == b"/tutti-":
            seeds["shm_offer"].add(s_rest[:OFFER])
            continue
        for stream in (c_rest, s_rest):
            for seg in frames(stream):
                if seg[0] == 1:  # zstd-compressed segments only; raw ones are plain bytes
                    seeds["zstd_segment"].add(seg[:65536])


def run_job(args, recorder, record_dir, extra_env):
    env = dict(os.environ)
    env.update(extra_env)
    env["RECORD_DIR"] = record_dir
    env["RECORD_PROXY_PORT"] = str(recorder.port)
    cmd = [args.tuttirun, "-np", str(args.np), "/usr/bin/python3",
           os.path.join(HERE, "record_job.py")]
    proc = subprocess.run(cmd, env=env, timeout=120, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.exit("record_seeds: job failed (%d):\n%s" % (proc.returncode, proc.stdout))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tuttirun", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--np", type=int, default=3)
    args = ap.parse_args()
    seeds = {k: set() for k in ("auth", "rendezvous_server", "rendezvous_client", "hello",
                                "shm_offer", "request_list", "response_list", "zstd_segment")}
    with tempfile.TemporaryDirectory() as record_dir:
        recorder = Recorder(record_dir)
        run_job(args, recorder, record_dir, {"TUTTI_FUSION_THRESHOLD_BYTES": "65536"})
        run_job(args, recorder, record_dir,
                {"TUTTI_SHM": "off", "TUTTI_COMPRESSION_ZSTD_LEVEL": "1"})
        # Autotune on: response lists that carry TunedParameters.
        run_job(args, recorder, record_dir,
                {"TUTTI_AUTOTUNE": "1", "TUTTI_AUTOTUNE_WARMUP_SAMPLES": "0",
                 "TUTTI_AUTOTUNE_STEPS_PER_SAMPLE": "1", "RECORD_STEPS": "14"})
        recorder.loop.call_soon_threadsafe(recorder.loop.stop)
        cut(list(recorder.conns), seeds)
    missing = []
    for target, items in sorted(seeds.items()):
        d = os.path.join(args.out, target)
        os.makedirs(d, exist_ok=True)
        for data in items:
            with open(os.path.join(d, hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
                f.write(data)
        print("record_seeds: %-18s %d seeds" % (target, len(items)))
        if not items:
            missing.append(target)
    if missing:
        sys.exit("record_seeds: no traffic recorded for " + ", ".join(missing))


if __name__ == "__main__":
    main()
