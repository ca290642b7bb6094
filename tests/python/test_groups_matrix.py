"""Consumer groups across the real clients (tests/groups/README.md): for each client and
assignment strategy / group protocol, a group of 3 consumers over a 10-partition topic consumes
keyed records with commits through leave, SIGKILL and added partitions, and static members
restart without a rebalance; the shared checker (tests/groups/checker.py) judges every run.

The broker is started the way the other tests start it ($STROM_BIN, e.g.
scripts/kafka-as-strom.sh for Apache Kafka 4.4) with the group properties in
harness.BROKER_PROPS; STROM_BOOTSTRAP=host:port uses a running broker instead (which then needs
those properties itself).
"""

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "groups"))

import harness  # noqa: E402
from conftest import StromProcess  # noqa: E402

# (client, strategy); "consumer" is group.protocol=consumer (KIP-848, the broker assigns)
CELLS = [
    ("kafka-python", "range"),
    ("confluent", "range"),
    ("confluent", "roundrobin"),
    ("confluent", "cooperative-sticky"),
    ("confluent", "consumer"),
    ("java", "range"),
    ("java", "roundrobin"),
    ("java", "sticky"),
    ("java", "cooperative-sticky"),
    ("java", "consumer"),
    ("franz-go", "cooperative-sticky"),
    ("franz-go", "consumer"),
    ("kafkajs", "roundrobin"),
]
# clients with static membership (kafka-python 2.2 and kafkajs 2.2 have none)
STATIC_CELLS = [
    ("confluent", "range"),
    ("confluent", "consumer"),
    ("java", "cooperative-sticky"),
    ("java", "consumer"),
    ("franz-go", "cooperative-sticky"),
]


@pytest.fixture(scope="module")
def groups_broker():
    external = os.environ.get("STROM_BOOTSTRAP")
    if external:
        yield external
        return
    tmp = tempfile.mkdtemp(prefix="strom-groups-")
    args = []
    for k, v in harness.BROKER_PROPS.items():
        args += ["--set", f"{k}={v}"]
    strom = StromProcess(Path(tmp) / "data", extra_args=args)
    try:
        strom.start(timeout=90)
        yield strom.bootstrap
    finally:
        strom.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def toolchain():
    d = Path(tempfile.mkdtemp(prefix="groups-tools-"))
    yield harness.Toolchain(d)
    shutil.rmtree(d, ignore_errors=True)


def client_cmd(toolchain, client):
    try:
        return toolchain.command(client)
    except harness.ToolMissing as e:
        if os.environ.get("CI"):
            pytest.fail(str(e))
        pytest.skip(str(e))


def judge(run):
    rep = run.finish()
    st = rep.stats
    print(f"groups {run.client} {run.cfg['strategy']}: checked {st['consumed']} consumed records "
          f"of {st['produced']} produced, {st['members']} members, {st['commits']} commits, "
          f"{st['redelivered_after_kill']} redelivered after the kill, "
          f"reassigned {st.get('reassigned_after_kill_ms', '-')} ms after the kill: "
          + ("OK" if rep.ok else "FAILED"))
    assert rep.ok, f"{run.dir}:\n{rep.summary()}"
    assert rep.stats["produced"] == run.produced and run.produced > 0
    assert rep.stats["consumed"] >= run.produced
    return rep


@pytest.mark.parametrize("client,strategy", CELLS, ids=[f"{c}-{s}" for c, s in CELLS])
def test_group_lifecycle(groups_broker, toolchain, client, strategy):
    """steady state; one member leaves; a member joins and another is SIGKILLed; partitions
    are added to the topic. Nothing skipped, nothing doubled but the killed member's
    uncommitted records, at most one owner per partition at any time."""
    cmd = client_cmd(toolchain, client)
    run = harness.Run(groups_broker, client, strategy, cmd, f"{client}-{strategy}")
    try:
        run.produce(200)
        for m in ("c1", "c2", "c3"):
            run.start(m)
        run.wait_stable(["c1", "c2", "c3"], 10, what="3 members")
        run.wait_consumed(what="steady state")

        run.event("phase", name="leave")
        assert run.workers["c1"].close() == 0, run.log_tail("c1")
        run.produce(100)
        run.wait_stable(["c2", "c3"], 10, what="after c1 left")
        run.wait_consumed(what="after c1 left")

        run.event("phase", name="join+kill")
        run.start("c4")
        run.wait_stable(["c2", "c3", "c4"], 10, what="c4 joined")
        run.produce(100)
        run.event("killed", member="c2", rebalance_within_ms=harness.REBALANCE_WITHIN_MS)
        run.workers["c2"].kill()
        run.produce(100)
        run.wait_stable(["c3", "c4"], 10, timeout=40, what="after c2 was killed")
        run.wait_consumed(what="after c2 was killed")

        run.event("phase", name="add partitions")
        run.add_partitions(12)
        run.produce(60, partitions=list(range(12)))
        run.wait_stable(["c3", "c4"], 12, timeout=40, what="after partitions were added")
        run.wait_consumed(what="after partitions were added")
    except BaseException:
        run.abort()
        print(f"reports kept in {run.dir}")
        raise
    rep = judge(run)
    assert rep.stats["members"] == 4
    shutil.rmtree(run.dir, ignore_errors=True)


@pytest.mark.parametrize("client,strategy", STATIC_CELLS,
                         ids=[f"{c}-{s}" for c, s in STATIC_CELLS])
def test_static_member_restart(groups_broker, toolchain, client, strategy):
    """A static member (group.instance.id) closes (no leave) and restarts within its session
    timeout: same partitions, same generation, no other member sees a rebalance."""
    cmd = client_cmd(toolchain, client)
    run = harness.Run(groups_broker, client, strategy, cmd, f"static-{client}-{strategy}")
    try:
        run.produce(150)
        # s3 joins last, so it is not the classic group's leader: franz-go deliberately
        # rebalances when a static *leader* restarts (to re-check the subscribed topics), and
        # that generation bump is the client's choice, not the broker's
        for m in ("s1", "s2"):
            run.start(m, instance_id=f"{run.topic}-{m}")
        run.wait_stable(["s1", "s2"], 10, what="2 static members")
        run.start("s3", instance_id=f"{run.topic}-s3")
        run.wait_stable(["s1", "s2", "s3"], 10, what="3 static members")
        run.wait_consumed(what="steady state")
        time.sleep(2)  # let a cooperative protocol finish its second round
        t0 = harness.now_ms()
        assert run.workers["s3"].close() == 0, run.log_tail("s3")
        run.start("s3#2", instance_id=f"{run.topic}-s3")
        run.produce(90)
        run.wait_stable(["s1", "s2", "s3#2"], 10, what="s3 restarted")
        run.wait_consumed(what="s3 restarted")
        time.sleep(2)  # a rebalance triggered by the restart would show within this window
        run.event("static_restart", old="s3", new="s3#2", from_ts=t0, to_ts=harness.now_ms())
    except BaseException:
        run.abort()
        print(f"reports kept in {run.dir}")
        raise
    judge(run)
    shutil.rmtree(run.dir, ignore_errors=True)


