#!/usr/bin/env python3
"""The shared checker of the consumer-group client matrix (tests/groups/README.md).

It reads every `*.jsonl` report of one run (one file per consumer process, written by the
client harnesses, plus the orchestrator's `orchestrator.jsonl`) and checks what a consumer group
promises to an application that commits after processing:

  1. every produced record was consumed (nothing skipped) with the key it was produced with;
  2. no record was consumed twice, except a redelivery after a member death: a record consumed
     by a member that was later SIGKILLed, that this member had not committed (no commit of
     its partition past the record), may be consumed again after the kill;
  3. per member (one consumer process) and partition, offsets strictly increase;
  4. a member consumes only from partitions it owns (between its `assigned` and `revoked` /
     `lost` / `closing` / being killed), and no partition is owned by two members at any
     instant, which for cooperative and KIP-848 protocols also covers the rebalance itself;
  5. the committed offset of a partition never moves backwards, and at the end of the run it is
     the partition's log end offset (all consumed records committed);
  6. a killed member's partitions are all owned by other members within the deadline the
     orchestrator gives (session timeout plus rebalance time);
  7. a static member (group.instance.id) restarted within its session timeout gets the same
     partitions and generation, and no other member sees an assignment change meanwhile.

Events (one JSON object per line; `ts` is wall-clock milliseconds, all processes run on one
machine):
  worker:       start, assigned {partitions, gen}, revoked {partitions}, lost {partitions},
                record {partition, offset, key, gen}, commit {offsets: {partition: next}},
                commit_failed {error}, closing, closed   (all with `member`)
  orchestrator: produced {partition, offset, key}, killed {member, rebalance_within_ms},
                static_restart {old, new, from_ts, to_ts}, end_offsets {offsets},
                final_committed {offsets}, phase {name}

Usage: checker.py RUN_DIR   (prints a summary; exit status 1 when any check fails)
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

INF = float("inf")


@dataclass
class Report:
    errors: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)

    @property
    def ok(self):
        return not self.errors

    def summary(self):
        lines = [f"checker: {k}={v}" for k, v in sorted(self.stats.items())]
        lines += [f"checker: ERROR {e}" for e in self.errors[:50]]
        if len(self.errors) > 50:
            lines.append(f"checker: ... {len(self.errors) - 50} more errors")
        lines.append("checker: OK" if self.ok else f"checker: FAILED ({len(self.errors)} errors)")
        return "\n".join(lines)


def load_run(run_dir) -> list:
    """All events of a run, each file's events in file order (a file is written sequentially)."""
    events = []
    for path in sorted(Path(run_dir).glob("*.jsonl")):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    # a SIGKILLed process may leave a torn last line; anything else is a bug
                    ev = {"ev": "torn", "file": path.name, "line": n}
                ev.setdefault("_file", path.name)
                events.append(ev)
    return events


def _int_keys(d):
    return {int(k): int(v) for k, v in (d or {}).items()}


def check(events) -> Report:
    rep = Report()
    err = rep.errors.append
    produced = {}
    killed = {}  # member -> kill event
    by_member = defaultdict(list)  # member -> its events in order
    orch = []
    for ev in events:
        kind = ev.get("ev")
        if kind == "torn":
            # only tolerable as the last line of a killed process' file; checked below
            by_member[("torn", ev["file"])].append(ev)
        elif kind == "produced":
            produced[(int(ev["partition"]), int(ev["offset"]))] = ev.get("key")
        elif "member" in ev and kind not in ("killed",):
            by_member[ev["member"]].append(ev)
        else:
            orch.append(ev)
            if kind == "killed":
                killed[ev["member"]] = ev
    torn = [m for m in by_member if isinstance(m, tuple)]
    for t in torn:
        del by_member[t]
    if torn and not killed:
        err(f"unparsable report lines in {sorted(t[1] for t in torn)} without a killed member")

    # --- per member: ownership state, intervals, offsets increasing ---
    intervals = defaultdict(list)  # partition -> [(start, end, member)]
    consumed = defaultdict(list)  # (p, o) -> [(ts, member, key)]
    commits = []  # (ts, member, partition, offset)
    owned_at_end = {}
    first_assigned = {}
    gens = {}  # member -> last generation seen
    for member, evs in by_member.items():
        end_ts = INF
        if member in killed:
            end_ts = killed[member]["ts"]
        owned = {}  # partition -> since ts
        last_off = {}
        stopped = False

        def close_owned(parts, ts, why, owned=owned, member=member):
            for p in parts:
                if p in owned:
                    intervals[p].append((owned.pop(p), ts, member))
                elif why != "closing":
                    err(f"{member}: {why} partition {p} it does not own (ts {ts})")

        for ev in evs:
            kind, ts = ev.get("ev"), ev.get("ts", 0)
            if ev.get("gen") is not None:
                gens[member] = ev["gen"]
            if kind == "assigned":
                parts = [int(p) for p in ev.get("partitions", [])]
                first_assigned.setdefault(member, (ts, sorted(parts), ev.get("gen")))
                for p in parts:
                    if p in owned:
                        err(f"{member}: assigned partition {p} it already owns (ts {ts})")
                    else:
                        owned[p] = ts
            elif kind in ("revoked", "lost"):
                if stopped:  # a client's close may call its revoke callback after `closing`
                    continue
                close_owned([int(p) for p in ev.get("partitions", [])], ts, kind)
            elif kind == "closing":
                owned_at_end[member] = sorted(owned)
                close_owned(list(owned), ts, "closing")
                stopped = True
            elif kind == "record":
                p, o = int(ev["partition"]), int(ev["offset"])
                consumed[(p, o)].append((ts, member, ev.get("key")))
                if stopped or ts > end_ts:
                    err(f"{member}: consumed {p}/{o} after closing or being killed")
                elif p not in owned:
                    err(f"{member}: consumed {p}/{o} from partition {p} it does not own (ts {ts})")
                if p in last_off and o <= last_off[p]:
                    err(f"{member}: offsets not increasing on partition {p}: "
                        f"{last_off[p]} then {o}")
                last_off[p] = o
            elif kind == "commit":
                for p, o in _int_keys(ev.get("offsets")).items():
                    commits.append((ts, member, p, o))
        if not stopped:
            owned_at_end[member] = sorted(owned)
            for p, since in owned.items():
                intervals[p].append((since, end_ts, member))

    # --- no partition owned by two members at once ---
    overlaps = 0
    for p, ivs in intervals.items():
        ivs.sort()
        for i, (s1, e1, m1) in enumerate(ivs):
            for s2, e2, m2 in ivs[i + 1:]:
                if s2 >= e1:
                    break
                if m1 != m2 and max(s1, s2) < min(e1, e2):
                    overlaps += 1
                    err(f"partition {p} owned by {m1} [{s1}, {e1}) and {m2} [{s2}, {e2}) at once")

    # --- every produced record consumed once (or redelivered after a death) ---
    commit_hw = defaultdict(int)  # (member, p) -> highest committed offset by that member
    for _ts, m, p, o in commits:
        commit_hw[(m, p)] = max(commit_hw[(m, p)], o)
    skipped = dups = redelivered = 0
    for (p, o), key in sorted(produced.items()):
        seen = sorted(consumed.get((p, o), []))
        if not seen:
            skipped += 1
            err(f"record {p}/{o} (key {key}) produced but never consumed")
            continue
        for _ts, m, k in seen:
            if k != key:
                err(f"record {p}/{o}: {m} consumed key {k!r}, produced {key!r}")
        for (ts, m, _k), (ts2, m2, _k2) in zip(seen, seen[1:], strict=False):
            kill = killed.get(m)
            if kill is not None and commit_hw[(m, p)] <= o and ts2 > kill["ts"] and m2 != m:
                redelivered += 1
            else:
                dups += 1
                err(f"record {p}/{o} consumed twice: by {m} at {ts} and by {m2} at {ts2}"
                    + ("" if kill is None else " (not a redelivery of an uncommitted record)"))
    for (p, o) in consumed:
        if (p, o) not in produced:
            err(f"record {p}/{o} consumed but never produced")

    # --- committed offsets never move backwards ---
    backwards = 0
    last_commit = {}
    for ts, m, p, o in sorted(commits):
        if p in last_commit and o < last_commit[p][0]:
            backwards += 1
            err(f"committed offset of partition {p} moved backwards: {last_commit[p][0]} "
                f"(by {last_commit[p][1]}) then {o} (by {m} at {ts})")
        last_commit[p] = (o, m)
    for ev in orch:
        if ev.get("ev") != "final_committed":
            continue
        ends = next((_int_keys(e["offsets"]) for e in orch if e.get("ev") == "end_offsets"), {})
        final = _int_keys(ev.get("offsets"))
        for p, end in sorted(ends.items()):
            if final.get(p, 0) != end:
                err(f"partition {p}: committed offset {final.get(p)} at the end, log end {end}")

    # --- a killed member's partitions move to others within the deadline ---
    for m, kill in killed.items():
        deadline = kill["ts"] + kill.get("rebalance_within_ms", INF)
        for p in owned_at_end.get(m, []):
            took = [s for s, _e, m2 in intervals[p] if m2 != m and s >= kill["ts"]]
            if not took or min(took) > deadline:
                err(f"partition {p} of killed {m} not reassigned within "
                    f"{kill.get('rebalance_within_ms')} ms of the kill")
            else:
                rep.stats["reassigned_after_kill_ms"] = max(
                    rep.stats.get("reassigned_after_kill_ms", 0), min(took) - kill["ts"])

    # --- a static member restart changes nothing ---
    for ev in orch:
        if ev.get("ev") != "static_restart":
            continue
        old, new = ev["old"], ev["new"]
        before = owned_at_end.get(old)
        after = first_assigned.get(new)
        if after is None:
            err(f"static member {new} (restart of {old}) got no assignment")
            continue
        if before != after[1]:
            err(f"static member {old} owned {before}, restarted as {new} it got {after[1]}")
        lo, hi = ev["from_ts"], ev["to_ts"]
        # the generation (member epoch with KIP-848) before the restart: the highest any member
        # reported, since librdkafka may report a stale epoch for a member whose assignment
        # shrank; in a stable group every member has the group's
        before_gen = {}
        for m, evs in by_member.items():
            for e in evs:
                if e.get("gen") is not None and e.get("ts", 0) < lo:
                    before_gen[m] = e["gen"]
        expected = max((g for m, g in before_gen.items() if m != new), default=None)
        if expected is not None and after[2] is not None and expected != after[2]:
            err(f"static restart of {old}: generation {expected} became {after[2]}")
        for m, evs in by_member.items():
            if m in (old, new):
                continue
            for e in evs:
                # A member's own close revokes everything it holds; the run's end may fall in
                # the same millisecond as the window's end, so nothing after `closing` counts.
                if e.get("ev") == "closing":
                    break
                if lo <= e.get("ts", 0) <= hi and e.get("gen") is not None \
                        and before_gen.get(m) is not None and e["gen"] != before_gen[m]:
                    err(f"static restart of {old}: {m} went from generation {before_gen[m]} "
                        f"to {e['gen']} at {e['ts']}")
                    break
                if e.get("ev") in ("assigned", "revoked", "lost") and lo <= e["ts"] <= hi \
                        and e.get("partitions"):
                    err(f"static restart of {old}: {m} saw {e['ev']} {e['partitions']} "
                        f"at {e['ts']}")

    rep.stats.update(produced=len(produced), consumed=sum(len(v) for v in consumed.values()),
                     members=len(by_member), commits=len(commits), skipped=skipped,
                     duplicates=dups, redelivered_after_kill=redelivered,
                     ownership_overlaps=overlaps, commits_backwards=backwards)
    return rep


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    rep = check(load_run(argv[1]))
    print(rep.summary())
    return 0 if rep.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
