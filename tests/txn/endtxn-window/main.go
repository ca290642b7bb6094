// What a broker answers to EndTxn(abort) carrying the epoch a transactions-v2 commit returned,
// while that commit's markers cannot be written yet (the data partition's leader is paused with
// SIGSTOP). Run it against 3 fresh nodes with scripts/franz-go-suite.sh --exec (see README.md).
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func main() {
	ctx := context.Background()
	seeds := strings.Split(os.Getenv("KGO_SEEDS"), ",")
	pids := map[int32]int{}
	for _, kv := range strings.Split(os.Getenv("SUITE_NODE_PIDS"), ",") {
		a, b, _ := strings.Cut(kv, ":")
		n, _ := strconv.Atoi(a)
		p, _ := strconv.Atoi(b)
		pids[int32(n)] = p
	}
	topic := fmt.Sprintf("probe-%d", time.Now().UnixNano())
	id := "probe-" + topic
	adm, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	must(err)
	ct := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = topic, 3, 1
	ct.Topics = append(ct.Topics, t)
	ct.TimeoutMillis = 30000
	r, err := ct.RequestWith(ctx, adm)
	must(err)
	must(kerr.ErrorForCode(r.Topics[0].ErrorCode))

	var coord int32 = -1
	for coord < 0 {
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.CoordinatorKey, fc.CoordinatorType = id, 1
		fr, err := fc.RequestWith(ctx, adm)
		if err == nil && fr.ErrorCode == 0 {
			coord = fr.NodeID
		} else {
			time.Sleep(200 * time.Millisecond)
		}
	}
	var part, leader int32 = -1, -1
	for part < 0 {
		md := kmsg.NewPtrMetadataRequest()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(topic)
		md.Topics = append(md.Topics, mt)
		mr, err := md.RequestWith(ctx, adm)
		must(err)
		for _, p := range mr.Topics[0].Partitions {
			if p.ErrorCode == 0 && p.Leader >= 0 && p.Leader != coord {
				part, leader = p.Partition, p.Leader
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Printf("coordinator %d, partition %d led by %d (pid %d)\n", coord, part, leader, pids[leader])

	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID(id),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(topic))
	must(err)
	// The client opts into transactions v2 at BeginTransaction once it knows the brokers'
	// finalized transaction.version: talk to them first.
	for _, n := range []int32{coord, leader} {
		_, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl.Broker(int(n)))
		must(err)
	}
	must(cl.Ping(ctx))
	must(cl.BeginTransaction())
	must(cl.ProduceSync(ctx, &kgo.Record{Partition: part, Value: []byte("x")}).FirstErr())
	pid, e0, err := cl.ProducerID(ctx)
	must(err)

	endTxn := func(epoch int16, commit bool) (int16, int16) {
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = id, pid, epoch, commit
		resp, err := req.RequestWith(ctx, cl.Broker(int(coord)))
		must(err)
		return resp.ErrorCode, resp.ProducerEpoch
	}
	must(syscall.Kill(pids[leader], syscall.SIGSTOP))
	cont := func() { _ = syscall.Kill(pids[leader], syscall.SIGCONT) }
	defer cont()
	c, e1 := endTxn(e0, true)
	must(kerr.ErrorForCode(c))
	fmt.Printf("producer %d: EndTxn(commit, epoch %d) answered epoch %d\n", pid, e0, e1)

	describe := func() string {
		req := kmsg.NewPtrDescribeTransactionsRequest()
		req.TransactionalIDs = []string{id}
		resp, err := req.RequestWith(ctx, cl.Broker(int(coord)))
		must(err)
		return resp.TransactionStates[0].State
	}
	name := func(c int16) string {
		if c == 0 {
			return "NONE"
		}
		return kerr.ErrorForCode(c).Error()
	}
	fmt.Printf("state while the leader is paused: %s\n", describe())
	c, _ = endTxn(e1, false)
	fmt.Printf("EndTxn(abort, epoch %d) while the markers wait: %s\n", e1, name(c))
	c, _ = endTxn(e0, true)
	fmt.Printf("EndTxn(commit, epoch %d) (a retry) while the markers wait: %s\n", e0, name(c))
	cont()
	for i := 0; ; i++ {
		st := describe()
		if st == "CompleteCommit" || i > 300 {
			fmt.Printf("state after resuming: %s\n", st)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	c, e2 := endTxn(e1, false)
	fmt.Printf("EndTxn(abort, epoch %d) after the markers: %s, epoch %d\n", e1, name(c), e2)
}
