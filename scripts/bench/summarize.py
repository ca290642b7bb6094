#!/usr/bin/env python3
"""Summarize compare.sh's results.csv: per workload the median (and min-max) of each broker and
the Strom/Kafka ratio of the medians, plus RSS. Optional machine limits (MB/s) turn throughput
into a fraction of the limit:

    summarize.py results.csv [--append-limit MBPS] [--tcp-limit MBPS]
"""
import argparse
import csv
import statistics
from collections import defaultdict


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--append-limit", type=float, help="buffered append MB/s (dd/fio)")
    ap.add_argument("--tcp-limit", type=float, help="loopback TCP MB/s (iperf3)")
    a = ap.parse_args()

    rows = list(csv.DictReader(open(a.csv)))
    data = defaultdict(lambda: defaultdict(list))
    rss = defaultdict(lambda: defaultdict(list))
    workloads = []
    for r in rows:
        if r["workload"] not in workloads:
            workloads.append(r["workload"])
        data[r["workload"]][r["broker"]].append(r)
        for k in ("rss_idle_kb", "rss_max_kb", "rss_end_kb"):
            v = num(r[k])
            if v:
                rss[r["broker"]][k].append(v)

    def med(rs, key):
        vals = [v for v in (num(r[key]) for r in rs) if v is not None]
        if not vals:
            return None, None, None, 0
        return statistics.median(vals), min(vals), max(vals), len(vals)

    def fmt(m, lo, hi, n, unit=""):
        if m is None:
            return "n/a"
        return f"{m:,.1f}{unit} ({lo:,.1f}-{hi:,.1f}, n={n})"

    print("| workload | Strom MB/s (median, min-max) | Kafka MB/s | Strom/Kafka | Strom / limit | Kafka / limit | Strom p99 ms | Kafka p99 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for w in workloads:
        s = med(data[w]["strom"], "mb_per_sec")
        k = med(data[w]["kafka"], "mb_per_sec")
        ratio = f"{s[0] / k[0]:.2f}" if s[0] and k[0] else "n/a"
        limit = a.tcp_limit if w.endswith("-c") else a.append_limit
        sl = f"{s[0] / limit:.0%}" if s[0] and limit else "n/a"
        kl = f"{k[0] / limit:.0%}" if k[0] and limit else "n/a"
        sp = med(data[w]["strom"], "p99_ms")[0]
        kp = med(data[w]["kafka"], "p99_ms")[0]
        print(f"| {w} | {fmt(*s)} | {fmt(*k)} | {ratio} | {sl} | {kl} | "
              f"{'n/a' if sp is None else f'{sp:.1f}'} | {'n/a' if kp is None else f'{kp:.1f}'} |")
    if any("strom-before" in data[w] for w in workloads):
        print()
        print("| workload | Strom before MB/s (median, min-max) | Strom after MB/s | after/before |")
        print("|---|---|---|---|")
        for w in workloads:
            b = med(data[w]["strom-before"], "mb_per_sec")
            s = med(data[w]["strom"], "mb_per_sec")
            ratio = f"{s[0] / b[0]:.2f}" if s[0] and b[0] else "n/a"
            print(f"| {w} | {fmt(*b)} | {fmt(*s)} | {ratio} |")
    print()
    print("| broker | idle RSS MB (median) | max RSS MB while producing/consuming | RSS at end of last workload MB |")
    print("|---|---|---|---|")
    for b in ("strom", "strom-before", "kafka"):
        if b not in rss:
            continue
        vals = rss[b]
        idle = statistics.median(vals["rss_idle_kb"]) / 1024 if vals["rss_idle_kb"] else 0
        mx = max(vals["rss_max_kb"]) / 1024 if vals["rss_max_kb"] else 0
        end = statistics.median(vals["rss_end_kb"]) / 1024 if vals["rss_end_kb"] else 0
        print(f"| {b} | {idle:.1f} | {mx:.1f} | {end:.1f} |")
    loads = [v for v in (num(r.get("load1")) for r in rows) if v is not None]
    if loads:
        print()
        print(f"1-minute load average before each run (2 cores): median {statistics.median(loads):.1f}, "
              f"min {min(loads):.1f}, max {max(loads):.1f}")


if __name__ == "__main__":
    main()
