#!/usr/bin/env python3
"""Summarize scripts/bench/groups.sh results.csv: per (workload, strategy, members, delay,
metric) the median and min-max of each broker over the rounds, and the Strom/Kafka ratio of the
medians. For times (…_ms) and broker CPU (broker_cpu_…) lower is better, so a ratio below 1 means Strom is ahead; for rates
(commits_per_sec, mb_per_sec) higher is better, so a ratio above 1 means Strom is ahead."""
import csv
import statistics
import sys
from collections import OrderedDict

rows = list(csv.DictReader(open(sys.argv[1])))
cells = OrderedDict()
brokers = []
for r in rows:
    if r["broker"] not in brokers:
        brokers.append(r["broker"])
    key = (r["workload"], r["strategy"], r["members"], r["delay_ms"], r["metric"])
    cells.setdefault(key, {}).setdefault(r["broker"], []).append(r["value"])


def fmt(x):
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.2f}" if abs(x) < 10 else f"{x:.1f}"


def stats(vals):
    nums = [float(v) for v in vals if v not in ("-", "")]
    failed = len(vals) - len(nums)
    if not nums:
        return None, f"failed x{failed}"
    med = statistics.median(nums)
    s = f"{fmt(med)} ({fmt(min(nums))}-{fmt(max(nums))})"
    if failed:
        s += f", failed x{failed}"
    return med, s


loads = [float(r["load1"]) for r in rows if r["load1"] not in ("", "-")]
print(f"rounds: {len(set(r['round'] for r in rows))}; 1-minute load before each run: "
      f"{min(loads):.1f}-{max(loads):.1f} (median {statistics.median(loads):.1f})\n"
      if loads else "")
head = ["workload", "strategy", "members", "delay ms", "metric"]
head += [f"{b} median (min-max)" for b in brokers]
if "strom" in brokers and "kafka" in brokers:
    head += ["Strom/Kafka", "ahead"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for (w, s, m, d, metric), per in cells.items():
    if metric in ("records", "failed"):
        continue
    line = [w, s, m, d, metric]
    meds = {}
    for b in brokers:
        med, txt = stats(per.get(b, []))
        meds[b] = med
        line.append(txt)
    if "strom" in brokers and "kafka" in brokers:
        if meds.get("strom") and meds.get("kafka"):
            ratio = meds["strom"] / meds["kafka"]
            lower_better = (metric.endswith("_ms") or metric.startswith("broker_cpu")
                            or metric == "join_generation")
            ahead = (ratio < 1) if lower_better else (ratio > 1)
            line += [f"{ratio:.2f}", "Strom" if ahead else "Kafka"]
        else:
            line += ["-", "-"]
    print("| " + " | ".join(line) + " |")
