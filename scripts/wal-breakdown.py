#!/usr/bin/env python3
"""Where a SQLite store's written pages go, per B-tree: WAL frames and checkpoint writes.

Runs the store bench's 64-producer case alone under strace, reads the page number of
every WAL frame from its 24-byte frame header and the page of every checkpoint
write from its file offset, and maps pages to tables with SQLite's dbstat view.

    python3 scripts/wal-breakdown.py            # needs strace and the sqlite3 CLI
    python3 scripts/wal-breakdown.py --one      # the 1-producer case instead

It also replays the trace against a model of the page cache — every write dirties the
4 KiB pages it touches, an fdatasync/fsync of a file cleans that file's pages — to show
what the kernel's `write_bytes` counts per file, and how much of it is a page written
twice because one commit's last WAL frame and the next commit's first share it.

It is a diagnostic for docs/BENCHMARKS-store.md, not a benchmark: strace slows the
writer, so groups come out somewhat larger than in the bench itself.
"""
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench_binary():
    env = dict(os.environ, CARGO_PROFILE_BENCH_LTO="false", CARGO_PROFILE_BENCH_CODEGEN_UNITS="16")
    out = subprocess.run(
        ["cargo", "bench", "--bench", "store", "--no-run", "--message-format=json"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    ).stdout
    exes = re.findall(r'"executable":"([^"]+/store-[0-9a-f]+)"', out)
    if not exes:
        sys.exit("could not find the store bench binary")
    return exes[-1]


def main():
    mode = "OUTPOST_BENCH_ONE_ONLY" if "--one" in sys.argv[1:] else "OUTPOST_BENCH_MANY_ONLY"
    for tool in ("strace", "sqlite3"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is needed")
    exe = bench_binary()
    work = tempfile.mkdtemp(prefix="outpost-wal-")
    trace = os.path.join(work, "trace.txt")
    env = dict(os.environ, OUTPOST_BENCH_DIR=os.path.join(work, "bench"), **{mode: "1"})
    run = subprocess.run(
        ["strace", "-ff", "-ttt", "-e", "trace=openat,pwrite64,fdatasync,fsync,ftruncate", "-xx", "-s", "24",
         "-o", trace, exe, "--bench"],
        env=env, capture_output=True, text=True, check=True,
    )
    print(run.stdout.strip())
    # One file per thread (-ff): no "<unfinished ...>" splits to stitch together.
    rx = re.compile(r'^pwrite64\((\d+), "((?:\\x[0-9a-f]{2})*)"(?:\.\.\.)?, (\d+), (\d+)\)')
    # Every thread's calls, in time order (-ttt stamps), for the page-cache replay.
    calls = sorted(
        (float(stamp), rest)
        for f in glob.glob(trace + ".*")
        for stamp, _, rest in (ln.rstrip("\n").partition(" ") for ln in open(f))
    )
    writes = []
    for _, line in calls:
        m = rx.match(line)
        if m:
            writes.append((m.group(1), m.group(2), int(m.group(3)), int(m.group(4))))
    wal_fds = {fd for fd, _, size, _ in writes if size == 24}
    db = glob.glob(os.path.join(work, "bench", "*", "store.sqlite3"))[0]
    psize = int(subprocess.run(["sqlite3", db, "PRAGMA page_size"],
                               capture_output=True, text=True, check=True).stdout)
    frames, ckpt, commits = collections.Counter(), collections.Counter(), 0
    for fd, hexs, size, off in writes:
        if fd in wal_fds and size == 24:
            b = bytes(int(x, 16) for x in hexs.split("\\x")[1:])
            frames[int.from_bytes(b[0:4], "big")] += 1
            commits += int.from_bytes(b[4:8], "big") != 0
        elif fd not in wal_fds and size == psize:
            ckpt[off // psize + 1] += 1
    rows = subprocess.run(
        ["sqlite3", db, "SELECT pageno, name, pagetype FROM dbstat"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    page = {int(p): f"{n} ({t})" for p, n, t in (r.split("|") for r in rows)}
    names = {"t1": "meta + counters (layout 2)", "t2": "messages", "t3": "id index (+ meta, counters since layout 3)", "t4": "expiry index",
             "sqlite_autoindex_t2_1": "messages' key index", "sqlite_schema": "page 1"}

    def label(p):
        s = page.get(p, "pointer map / free (no table)")
        t = s.split(" ")[0]
        return f"{s} — {names[t]}" if t in names else s

    by_f, by_c = collections.Counter(), collections.Counter()
    for p, n in frames.items():
        by_f[label(p)] += n
    for p, n in ckpt.items():
        by_c[label(p)] += n
    commits = max(commits, 1)
    print(f"{psize}-byte pages; {commits} commits; per commit: {sum(frames.values()) / commits:.1f} WAL frames, "
          f"{sum(ckpt.values()) / commits:.1f} checkpoint page writes")
    print("| pages | WAL frames / commit | checkpoint writes / commit |")
    print("|---|---|---|")
    for k in sorted(set(by_f) | set(by_c), key=lambda k: -(by_f[k] + by_c[k])):
        if (by_f[k] + by_c[k]) / commits >= 0.05:
            print(f"| {k} | {by_f[k] / commits:.2f} | {by_c[k] / commits:.2f} |")
    page_cache_replay(calls)
    shutil.rmtree(work)


def page_cache_replay(calls):
    """Bytes written vs. 4 KiB pages dirtied, per file, from the time-ordered calls."""
    opened = re.compile(r'^openat\(AT_FDCWD, "((?:\\x[0-9a-f]{2})+)".*\) = (\d+)$')
    write = re.compile(r'^pwrite64\((\d+), .*, (\d+), (\d+)\) = \d+$')
    sync = re.compile(r'^f(?:data)?sync\((\d+)\)')
    trunc = re.compile(r'^ftruncate\((\d+), (\d+)\)')
    name, dirty = {}, collections.defaultdict(set)
    written, pages, again = collections.Counter(), collections.Counter(), collections.Counter()
    cleaned = collections.defaultdict(set)  # pages written back since they were last dirtied
    for _, line in calls:
        if m := opened.match(line):
            path = bytes(int(x, 16) for x in m.group(1).split("\\x")[1:]).decode()
            name[m.group(2)] = os.path.basename(path)
        elif m := write.match(line):
            f = name.get(m.group(1), "fd " + m.group(1))
            size, off = int(m.group(2)), int(m.group(3))
            written[f] += size
            for p in range(off // 4096, (off + size - 1) // 4096 + 1):
                if p not in dirty[f]:
                    dirty[f].add(p)
                    pages[f] += 1
                    again[f] += p in cleaned[f]
        elif m := sync.match(line):
            f = name.get(m.group(1), "fd " + m.group(1))
            cleaned[f] = dirty[f]
            dirty[f] = set()
        elif m := trunc.match(line):
            f = name.get(m.group(1), "fd " + m.group(1))
            dirty[f] = {p for p in dirty[f] if p * 4096 < int(m.group(2))}
    print("\n| file | bytes written | 4 KiB pages dirtied (as write_bytes counts) | of them dirtied again right after a sync |")
    print("|---|---|---|---|")
    for f in sorted(written, key=lambda f: -written[f]):
        print(f"| {f} | {written[f]:,} | {pages[f] * 4096:,} | {again[f] * 4096:,} |")


if __name__ == "__main__":
    main()
