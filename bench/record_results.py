#!/usr/bin/env python3
"""Appends measurements (JSON lines from a benchmark run) to bench/results/,
each stamped with the commit, the date, the device and the command, so the
next person can compare.

usage: bench/record_results.py RESULTS.jsonl --device "NVIDIA H100 80GB HBM3" --command "bench/gpu_bench.sh"
       [--out bench/results/gpu.jsonl]
"""
import argparse, datetime, json, subprocess, sys

ap = argparse.ArgumentParser()
ap.add_argument("results")
ap.add_argument("--device", required=True)
ap.add_argument("--command", required=True)
ap.add_argument("--out", default="bench/results/gpu.jsonl")
ap.add_argument("--commit", help="the tree measured, when it is not HEAD (e.g. 'abc1234+dirty')")
a = ap.parse_args()
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
stamp = {"commit": a.commit or (commit + ("+dirty" if dirty else "")), "date": datetime.date.today().isoformat(),
         "device": a.device, "command": a.command}
n = 0
with open(a.results) as src, open(a.out, "a") as dst:
    for line in src:
        line = line.strip()
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        dst.write(json.dumps({**stamp, **rec}) + "\n")
        n += 1
print(f"recorded {n} results in {a.out}", file=sys.stderr)
