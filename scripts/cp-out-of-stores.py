#!/usr/bin/env python3
"""Times `mountfs cp` out of a SQLite and a PostgreSQL store, for big files (issue 27).

Usage: scripts/cp-out-of-stores.py [--sizes 100,400] [--postgres URL] NAME=BINARY...

For each binary (e.g. before=/tmp/old-mountfs after=target/debug/mountfs), each size in MB and
each store: a file of that size (text a database compresses well, as source code or logs are)
is copied disk -> store, then store -> disk, and the second copy's wall time and peak memory
(the child's VmHWM, polled) are printed, with the time per MB; the bytes copied back are
compared with `cmp`. Each binary gets its own SQLite file and its own PostgreSQL database
(created under URL's server, dropped at the end): a newer binary migrates a schema an older one
then refuses. Each size also gets a disk -> disk copy of the same file by the last binary, the
floor every copy pays (hashing, writing the destination); "over disk" is a copy's time above
it, what reading the store costs. All run in the same session, so their figures compare: quote
ratios.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse

MIB = 1024 * 1024


def write_text(path, size):
    """`size` bytes of numbered lines: compressible (lz4 ~4x), never two lines the same."""
    with open(path, "wb") as out:
        written, n = 0, 0
        block = []
        while written < size:
            line = b"%09d the quick brown fox jumps over the lazy dog; copy me byte for byte\n" % n
            block.append(line)
            written += len(line)
            n += 1
            if len(block) == 4096:
                out.write(b"".join(block))
                block = []
        out.write(b"".join(block))
        out.truncate(size)


def run_measured(args):
    """Runs args; returns (seconds, peak bytes) by polling /proc/PID/status for VmHWM."""
    started = time.monotonic()
    child = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    status = f"/proc/{child.pid}/status"
    while child.poll() is None:
        try:
            with open(status) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]) * 1024)
        except OSError:
            pass
        time.sleep(0.005)
    elapsed = time.monotonic() - started
    if child.returncode != 0:
        sys.exit(f"{' '.join(args)} failed: {child.stderr.read().decode(errors='replace')}")
    return elapsed, peak


def psql(url, sql):
    subprocess.run(["psql", url, "-qAtc", sql], check=True, stdout=subprocess.DEVNULL)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100,400")
    parser.add_argument("--postgres", default=os.environ.get("MOUNTFS_TEST_POSTGRES"))
    parser.add_argument("binaries", nargs="+", help="NAME=PATH")
    options = parser.parse_args()
    binaries = [b.split("=", 1) for b in options.binaries]
    sizes = [int(s) for s in options.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="cp-stores-") as work:
        databases = []
        stores = {}
        for name, _ in binaries:
            stores[name] = [("sqlite", f"store:sqlite:{work}/{name}.db")]
            if options.postgres:
                db = f"mountfs_cpbench_{name}_{os.getpid()}"
                psql(options.postgres, f"CREATE DATABASE {db}")
                databases.append(db)
                url = urllib.parse.urlsplit(options.postgres)._replace(path="/" + db).geturl()
                stores[name].append(("postgres", f"store:postgres:{url}"))
        try:
            print(f"load: {os.getloadavg()}")
            print("| binary | from | size | cp out: time | over disk | over disk per 100 MB | peak RSS |")
            print("|---|---|---|---|---|---|---|")
            for size in sizes:
                source = f"{work}/source-{size}"
                os.makedirs(source, exist_ok=True)
                write_text(f"{source}/big.txt", size * 1000 * 1000)
                floor, peak = run_measured(
                    [binaries[-1][1], "cp", "--from", f"disk:{source}", "--to", f"disk:{work}/floor"]
                )
                subprocess.run(["rm", "-rf", f"{work}/floor"], check=True)
                print(
                    f"| {binaries[-1][0]} | disk | {size} MB | {floor:.1f} s | – | – | "
                    f"{peak / MIB:.0f} MiB |",
                    flush=True,
                )
                for name, binary in binaries:
                    for kind, spec in stores[name]:
                        spec_ns = f"{spec},namespace=s{size}"
                        back = f"{work}/back-{name}-{kind}-{size}"
                        run_measured([binary, "cp", "--from", f"disk:{source}", "--to", spec_ns])
                        seconds, peak = run_measured(
                            [binary, "cp", "--from", spec_ns, "--to", f"disk:{back}"]
                        )
                        same = subprocess.run(["cmp", "-s", f"{source}/big.txt", f"{back}/big.txt"])
                        if same.returncode != 0:
                            sys.exit(f"{name} {kind} {size} MB: the copy differs")
                        over = seconds - floor
                        print(
                            f"| {name} | {kind} | {size} MB | {seconds:.1f} s | {over:.1f} s | "
                            f"{over / size * 100:.1f} s | {peak / MIB:.0f} MiB |",
                            flush=True,
                        )
                        subprocess.run(["rm", "-rf", back], check=True)
                subprocess.run(["rm", "-rf", source], check=True)
            print(f"load: {os.getloadavg()}")
        finally:
            for db in databases:
                psql(options.postgres, f"DROP DATABASE IF EXISTS {db}")


if __name__ == "__main__":
    main()
