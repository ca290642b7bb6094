"""Unit tests of the consumer-group checker (tests/groups/checker.py): a clean crafted run
passes, and each fault it must catch is reported. No broker needed."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "groups"))

import checker  # noqa: E402


def produced(n_per_partition, partitions=(0, 1)):
    return [{"ev": "produced", "partition": p, "offset": o, "key": f"k{p}-{o}"}
            for p in partitions for o in range(n_per_partition)]


def rec(member, p, o, ts, gen=1):
    return {"ev": "record", "member": member, "partition": p, "offset": o,
            "key": f"k{p}-{o}", "ts": ts, "gen": gen}


def commit(member, p, nxt, ts):
    return {"ev": "commit", "member": member, "offsets": {str(p): nxt}, "ts": ts}


def assigned(member, parts, ts, gen=1):
    return {"ev": "assigned", "member": member, "partitions": parts, "ts": ts, "gen": gen}


def revoked(member, parts, ts):
    return {"ev": "revoked", "member": member, "partitions": parts, "ts": ts}


def ends(offsets):
    return [{"ev": "end_offsets", "offsets": offsets, "ts": 0},
            {"ev": "final_committed", "offsets": offsets, "ts": 0}]


def clean_run():
    """a owns 0, b owns 1; 3 records each, committed; then a closes and b takes 0."""
    ev = produced(4)
    ev += [assigned("a", [0], 10), rec("a", 0, 0, 11), rec("a", 0, 1, 12), rec("a", 0, 2, 13),
           commit("a", 0, 3, 14), {"ev": "closing", "member": "a", "ts": 20},
           revoked("a", [0], 21)]
    ev += [assigned("b", [1], 10), rec("b", 1, 0, 11), rec("b", 1, 1, 12), rec("b", 1, 2, 13),
           rec("b", 1, 3, 14), commit("b", 1, 4, 15), revoked("b", [1], 22),
           assigned("b", [0, 1], 30, gen=2), rec("b", 0, 3, 31, gen=2), commit("b", 0, 4, 32)]
    return ev + ends({"0": 4, "1": 4})


def errors(events):
    rep = checker.check(events)
    return rep, "\n".join(rep.errors)


def test_clean_run_passes():
    rep, text = errors(clean_run())
    assert rep.ok, text
    assert rep.stats["produced"] == 8 and rep.stats["consumed"] == 8
    assert rep.stats["members"] == 2


def test_skipped_record_is_reported():
    ev = [e for e in clean_run() if not (e.get("ev") == "record" and e["partition"] == 1
                                         and e["offset"] == 2)]
    rep, text = errors(ev)
    assert not rep.ok
    assert "record 1/2 (key k1-2) produced but never consumed" in text
    assert rep.stats["skipped"] == 1


def test_double_owner_is_reported():
    # b is assigned partition 0 while a still owns it (a revokes only at 21)
    ev = clean_run()
    ev.insert(ev.index(assigned("b", [1], 10)) + 1, assigned("b", [0], 15))
    rep, text = errors(ev)
    assert "partition 0 owned by a [10, 20) and b [15, " in text, text
    assert rep.stats["ownership_overlaps"] >= 1


def test_backwards_commit_is_reported():
    ev = clean_run() + [commit("b", 0, 2, 40)]
    rep, text = errors(ev)
    assert "committed offset of partition 0 moved backwards: 4 (by b) then 2 (by b at 40)" in text
    assert rep.stats["commits_backwards"] == 1


def test_duplicate_without_death_is_reported():
    ev = clean_run() + [rec("b", 0, 2, 33, gen=2)]
    rep, text = errors(ev)
    assert "record 0/2 consumed twice: by a at 13 and by b at 33" in text
    # b also went back from 3 to 2 on partition 0
    assert "b: offsets not increasing on partition 0: 3 then 2" in text
    assert rep.stats["duplicates"] == 1


def test_redelivery_after_kill_is_allowed_only_if_uncommitted():
    ev = produced(3, partitions=(0,))
    ev += [assigned("a", [0], 10), rec("a", 0, 0, 11), commit("a", 0, 1, 12), rec("a", 0, 1, 13),
           {"ev": "killed", "member": "a", "ts": 14, "rebalance_within_ms": 100},
           assigned("b", [0], 50), rec("b", 0, 1, 51), rec("b", 0, 2, 52), commit("b", 0, 3, 53)]
    ev += ends({"0": 3})
    rep, text = errors(ev)
    assert rep.ok, text
    assert rep.stats["redelivered_after_kill"] == 1
    # ...but a record the killed member had committed must not come back
    bad = ev + [rec("b", 0, 0, 60)]
    rep, text = errors(bad)
    assert "record 0/0 consumed twice: by a at 11 and by b at 60 (not a redelivery" in text


def test_slow_reassignment_after_kill_is_reported():
    ev = produced(1, partitions=(0,))
    ev += [assigned("a", [0], 10), {"ev": "killed", "member": "a", "ts": 14,
                                    "rebalance_within_ms": 100},
           assigned("b", [0], 500), rec("b", 0, 0, 501), commit("b", 0, 1, 502)] + ends({"0": 1})
    rep, text = errors(ev)
    assert "partition 0 of killed a not reassigned within 100 ms of the kill" in text


def test_consuming_an_unowned_partition_is_reported():
    ev = clean_run() + [rec("b", 2, 0, 40)]
    rep, text = errors(ev)
    assert "b: consumed 2/0 from partition 2 it does not own" in text
    assert "record 2/0 consumed but never produced" in text


def test_uncommitted_end_is_reported():
    ev = [e for e in clean_run() if e.get("ev") != "final_committed"]
    ev.append({"ev": "final_committed", "offsets": {"0": 3, "1": 4}, "ts": 0})
    rep, text = errors(ev)
    assert "partition 0: committed offset 3 at the end, log end 4" in text


def test_static_restart_with_rebalance_is_reported():
    ev = produced(1, partitions=(0, 1))
    ev += [assigned("s1", [0], 10, gen=5), rec("s1", 0, 0, 11, gen=5), commit("s1", 0, 1, 12),
           {"ev": "closing", "member": "s1", "ts": 20}]
    ev += [assigned("o", [1], 10, gen=5), rec("o", 1, 0, 11, gen=5), commit("o", 1, 1, 12)]
    ev += [assigned("s1#2", [0], 30, gen=5),
           {"ev": "static_restart", "old": "s1", "new": "s1#2", "from_ts": 20, "to_ts": 40}]
    ev += ends({"0": 1, "1": 1})
    rep, text = errors(ev)
    assert rep.ok, text
    # a generation bump, different partitions, and another member rebalanced
    bad = [e for e in ev if e.get("member") != "s1#2"] + [assigned("s1#2", [0, 1], 30, gen=6),
                                                          revoked("o", [1], 25),
                                                          rec("o", 1, 0, 26, gen=6)]
    rep, text = errors(bad)
    assert "static member s1 owned [0], restarted as s1#2 it got [0, 1]" in text
    assert "generation 5 became 6" in text
    assert "static restart of s1: o saw revoked [1] at 25" in text
    assert "static restart of s1: o went from generation 5 to 6 at 26" in text


def test_a_close_revocation_in_the_last_millisecond_of_a_static_restart_is_not_a_rebalance():
    # The run ends right after the restart's window: another member's close (which revokes
    # everything it holds) may land in the window's last millisecond.
    ev = produced(1, partitions=(0, 1))
    ev += [assigned("s1", [0], 10, gen=5), rec("s1", 0, 0, 11, gen=5), commit("s1", 0, 1, 12),
           {"ev": "closing", "member": "s1", "ts": 20}]
    ev += [assigned("o", [1], 10, gen=5), rec("o", 1, 0, 11, gen=5), commit("o", 1, 1, 12),
           {"ev": "closing", "member": "o", "ts": 40}, revoked("o", [1], 40)]
    ev += [assigned("s1#2", [0], 30, gen=5),
           {"ev": "static_restart", "old": "s1", "new": "s1#2", "from_ts": 20, "to_ts": 40}]
    ev += ends({"0": 1, "1": 1})
    rep, text = errors(ev)
    assert rep.ok, text


def test_load_run_reads_all_reports(tmp_path):
    ev = clean_run()
    for name in ("orchestrator", "a", "b"):
        with open(tmp_path / f"{name}.jsonl", "w") as f:
            for e in ev:
                owner = e.get("member")
                if (owner or "orchestrator") == name:
                    f.write(json.dumps(e) + "\n")
    with open(tmp_path / "b.jsonl", "a") as f:
        f.write('{"ev": "rec')  # torn line without any killed member: reported
    rep = checker.check(checker.load_run(tmp_path))
    assert rep.stats["consumed"] == 8
    assert any("unparsable report lines" in e for e in rep.errors)
