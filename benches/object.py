#!/usr/bin/env python3
"""Object mounts (issue 44) against boto3, the same requests to the same S3 server in one run.

One `moto_server` (threaded, as an S3-compatible server would serve several clients; the tests
serialise it only for the conditional-write races) on 127.0.0.1, one bucket, and:
- small `read_file`: mountfs's `read_file` of a 2 KiB object over stdio against boto3's
  `get_object` round trip of the same key (median of ROUNDS calls each, alternating);
- grep: mountfs's `grep` of a literal over 2,000 objects (files_with_matches) against a client
  that lists them (`list_objects_v2` pages) and gets them one after another, searching each;
- peak memory (VmHWM) of the mountfs server after grepping the 2,000 objects, and of
  `mountfs cp` copying a 1 GiB file from disk into the bucket (multipart, streamed), with
  boto3's `upload_file` (its TransferManager, multipart) of the same file timed beside it.

Run: python3 benches/object.py [--binary target/debug/mountfs] [--rounds 50] [--big-mib 1024]
Needs moto[server] (tests/python/requirements-moto.txt) and boto3.
"""

import argparse
import concurrent.futures
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import boto3
from botocore.config import Config

KEY, SECRET = "mountfs-bench", "mountfs-bench-secret"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


class Server:
    def __init__(self, binary, args, env):
        self.proc = subprocess.Popen(
            [binary, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=env)
        self.next = 1
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "object-bench", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def request(self, method, params):
        ident = self.next
        self.next += 1
        self.send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        while True:
            message = json.loads(self.proc.stdout.readline())
            if message.get("id") == ident:
                return message

    def call(self, tool, arguments):
        result = self.request("tools/call", {"name": tool, "arguments": arguments})["result"]
        if result.get("isError"):
            raise RuntimeError(f"{tool}: {result['content'][0]['text'][:300]}")
        return result

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def text_of(result):
    return "".join(c.get("text", "") for c in result["content"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default="target/debug/mountfs")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--big-mib", type=int, default=1024)
    args = parser.parse_args()

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    moto = subprocess.Popen(["moto_server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    work = tempfile.mkdtemp(prefix="object-bench-")
    try:
        s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY,
                          aws_secret_access_key=SECRET, region_name="us-east-1",
                          config=Config(max_pool_connections=16))
        for _ in range(200):
            try:
                s3.list_buckets()
                break
            except Exception:
                time.sleep(0.1)
        bucket = "bench"
        s3.create_bucket(Bucket=bucket)
        line = b"an ordinary line of a small text object, nothing special in it\n"
        body = line * 32  # 2 KiB
        s3.put_object(Bucket=bucket, Key="small.txt", Body=body)
        needle = b"needle-7341"

        def put(i):
            content = body + (needle + b"\n" if i == 1234 else b"")
            s3.put_object(Bucket=bucket, Key=f"g/d{i % 20:02}/f{i:05}.txt", Body=content)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(put, range(args.objects)))

        env = {**os.environ, "RUST_LOG": "error", "AWS_ACCESS_KEY_ID": KEY,
               "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_ENDPOINT_URL": endpoint,
               "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1"}
        server = Server(args.binary, ["--mount", "/=memory", "--mount",
                                      f"/b/=object:s3://{bucket}", "--audit", "off"], env)
        # Warm both (connections, first-call costs).
        for _ in range(5):
            server.call("read_file", {"file_path": "/b/small.txt"})
            s3.get_object(Bucket=bucket, Key="small.txt")["Body"].read()

        server.call("write_file", {"file_path": "/small.txt", "content": body.decode()})
        mine, theirs, memory = [], [], []
        for _ in range(args.rounds):
            t = time.perf_counter()
            server.call("read_file", {"file_path": "/small.txt"})
            memory.append(time.perf_counter() - t)
            t = time.perf_counter()
            server.call("read_file", {"file_path": "/b/small.txt"})
            mine.append(time.perf_counter() - t)
            t = time.perf_counter()
            s3.get_object(Bucket=bucket, Key="small.txt")["Body"].read()
            theirs.append(time.perf_counter() - t)
        read_mine, read_theirs = statistics.median(mine), statistics.median(theirs)
        read_memory = statistics.median(memory)

        def boto_grep():
            found = []
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="g/"):
                for item in page.get("Contents", []):
                    data = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
                    if needle in data:
                        found.append(item["Key"])
            return found

        grep_rounds = 3
        gm, gt = [], []
        for _ in range(grep_rounds):
            t = time.perf_counter()
            answer = text_of(server.call("grep", {"pattern": needle.decode(), "path": "/b/g",
                                                  "output_mode": "files_with_matches"}))
            gm.append(time.perf_counter() - t)
            assert "f01234.txt" in answer, answer
            t = time.perf_counter()
            found = boto_grep()
            gt.append(time.perf_counter() - t)
            assert found == ["g/d14/f01234.txt"], found
        grep_mine, grep_theirs = statistics.median(gm), statistics.median(gt)
        grep_peak = peak_of(server.proc.pid)
        server.close()

        if args.big_mib == 0:
            report(args, read_mine, read_theirs, read_memory, grep_mine, grep_theirs, grep_rounds,
                   grep_peak, None)
            return
        # 1 GiB: mountfs cp (peak RSS polled) and boto3's upload_file, same file, same server.
        source = os.path.join(work, "big")
        os.makedirs(source)
        big = os.path.join(source, "big.bin")
        block = os.urandom(1024 * 1024)
        with open(big, "wb") as f:
            for i in range(args.big_mib):
                f.write(i.to_bytes(8, "little") + block[8:])
        t = time.perf_counter()
        cp = subprocess.Popen([args.binary, "cp", "--from", f"disk:{source}", "--to",
                               f"object:s3://{bucket}/copied"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        cp_peak = 0
        while cp.poll() is None:
            try:
                cp_peak = max(cp_peak, peak_of(cp.pid))
            except (FileNotFoundError, ProcessLookupError):
                pass
            time.sleep(0.005)
        cp_time = time.perf_counter() - t
        if cp.returncode != 0:
            raise RuntimeError(f"cp failed: {cp.stderr.read().decode()}")
        size = s3.head_object(Bucket=bucket, Key="copied/big.bin")["ContentLength"]
        assert size == args.big_mib * 1024 * 1024, size
        t = time.perf_counter()
        s3.upload_file(big, bucket, "boto/big.bin")
        boto_time = time.perf_counter() - t

        report(args, read_mine, read_theirs, read_memory, grep_mine, grep_theirs, grep_rounds,
               grep_peak, (cp_peak, cp_time, boto_time))
    finally:
        moto.kill()
        moto.wait()
        subprocess.run(["rm", "-rf", work])


def report(args, read_mine, read_theirs, read_memory, grep_mine, grep_theirs, grep_rounds,
           grep_peak, copy):
    load = os.getloadavg()
    mib = 1024 * 1024
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores; "
          f"binary {args.binary}")
    print(f"small read_file  mountfs {read_mine * 1000:.2f} ms  boto3 get_object "
          f"{read_theirs * 1000:.2f} ms  ratio {read_mine / read_theirs:.2f}x (median of "
          f"{args.rounds}; the same read_file on a memory mount: {read_memory * 1000:.2f} ms)")
    print(f"grep {args.objects} objects  mountfs {grep_mine * 1000:.0f} ms  boto3 list+get "
          f"one by one {grep_theirs * 1000:.0f} ms  ratio {grep_mine / grep_theirs:.2f}x "
          f"(median of {grep_rounds})")
    print(f"peak memory  mountfs server after the greps {grep_peak / mib:.1f} MiB")
    if copy:
        cp_peak, cp_time, boto_time = copy
        print(f"peak memory  mountfs cp of {args.big_mib} MiB into the bucket {cp_peak / mib:.1f} MiB "
              f"({cp_time:.1f} s; boto3 upload_file of the same file {boto_time:.1f} s)")


if __name__ == "__main__":
    sys.exit(main())
