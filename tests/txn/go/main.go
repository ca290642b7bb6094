// Transactions harness for franz-go (kgo's own transactional producer and read_committed
// fetching). Protocol: tests/txn/README.md.
//
//	franz-txn-worker CONFIG_JSON      then one JSON command per stdin line, one JSON answer per line
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type config struct {
	Bootstrap            string `json:"bootstrap"`
	TransactionalID      string `json:"transactional_id"`
	TransactionTimeoutMs int    `json:"transaction_timeout_ms"`
	Isolation            string `json:"isolation"`
	ClientID             string `json:"client_id"`
}

type command struct {
	Op     string `json:"op"`
	Topic  string `json:"topic"`
	Prefix string `json:"prefix"`
	N      int    `json:"n"`
	IdleMs int    `json:"idle_ms"`
	MaxMs  int    `json:"max_ms"`
}

type worker struct {
	cfg      config
	producer *kgo.Client
}

func (w *worker) clientID() string {
	if w.cfg.ClientID != "" {
		return w.cfg.ClientID
	}
	return "txn-franz-go"
}

func ctx30() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

func (w *worker) run(c command) (map[string]any, error) {
	switch c.Op {
	case "init":
		timeout := time.Duration(w.cfg.TransactionTimeoutMs) * time.Millisecond
		if timeout == 0 {
			timeout = time.Minute
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(w.cfg.Bootstrap), kgo.ClientID(w.clientID()),
			kgo.TransactionalID(w.cfg.TransactionalID), kgo.TransactionTimeout(timeout),
			kgo.ProducerLinger(5*time.Millisecond), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
		if err != nil {
			return nil, err
		}
		w.producer = cl
		ctx, cancel := ctx30()
		defer cancel()
		// InitProducerId happens here (kgo initializes lazily otherwise).
		_, _, err = cl.ProducerID(ctx)
		return nil, err
	case "begin":
		return nil, w.producer.BeginTransaction()
	case "send":
		ctx, cancel := ctx30()
		defer cancel()
		recs := make([]*kgo.Record, 0, c.N)
		for i := 0; i < c.N; i++ {
			v := []byte(fmt.Sprintf("%s-%d", c.Prefix, i))
			recs = append(recs, &kgo.Record{Topic: c.Topic, Key: v, Value: v})
		}
		return nil, w.producer.ProduceSync(ctx, recs...).FirstErr()
	case "commit", "abort":
		ctx, cancel := ctx30()
		defer cancel()
		commit := kgo.TryCommit
		if c.Op == "abort" {
			commit = kgo.TryAbort
			if err := w.producer.AbortBufferedRecords(ctx); err != nil {
				return nil, err
			}
		} else if err := w.producer.Flush(ctx); err != nil {
			return nil, err
		}
		return nil, w.producer.EndTransaction(ctx, commit)
	case "read":
		return w.read(c)
	case "end_offsets":
		return w.endOffsets(c)
	case "close":
		if w.producer != nil {
			w.producer.Close()
		}
		return map[string]any{"closed": true}, nil
	}
	return nil, fmt.Errorf("unsupported op %q", c.Op)
}

func (w *worker) isolation() kgo.IsolationLevel {
	if w.cfg.Isolation == "read_uncommitted" {
		return kgo.ReadUncommitted()
	}
	return kgo.ReadCommitted()
}

func (w *worker) read(c command) (map[string]any, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.cfg.Bootstrap), kgo.ClientID(w.clientID()),
		kgo.ConsumeTopics(c.Topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(w.isolation()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	idle := time.Duration(c.IdleMs) * time.Millisecond
	if idle == 0 {
		idle = 3 * time.Second
	}
	maxDur := time.Duration(c.MaxMs) * time.Millisecond
	if maxDur == 0 {
		maxDur = time.Minute
	}
	deadline := time.Now().Add(maxDur)
	last := time.Now()
	out := [][]any{}
	for time.Now().Before(deadline) && time.Since(last) < idle {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, []any{r.Partition, r.Offset, string(r.Value)})
			last = time.Now()
		})
	}
	return map[string]any{"records": out}, nil
}

func (w *worker) endOffsets(c command) (map[string]any, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.cfg.Bootstrap), kgo.ClientID(w.clientID()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := ctx30()
	defer cancel()
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(c.Topic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = 0
	if w.cfg.Isolation != "read_uncommitted" {
		req.IsolationLevel = 1
	}
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = c.Topic
	for _, t := range mresp.Topics {
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = p.Partition
			rp.Timestamp = -1
			rt.Partitions = append(rt.Partitions, rp)
		}
	}
	req.Topics = append(req.Topics, rt)
	// kgo splits the request per partition leader and merges the answers.
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	ends := map[string]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if e := kerr.ErrorForCode(p.ErrorCode); e != nil {
				return nil, e
			}
			ends[strconv.Itoa(int(p.Partition))] = p.Offset
		}
	}
	return map[string]any{"end_offsets": ends}, nil
}

func answer(res map[string]any, err error) map[string]any {
	if err == nil {
		if res == nil {
			res = map[string]any{}
		}
		res["ok"] = true
		return res
	}
	code := "error"
	var ke *kerr.Error
	if errors.As(err, &ke) {
		code = ke.Message
	}
	fatal := errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) || errors.Is(err, kerr.InvalidTxnState)
	return map[string]any{"ok": false, "error": err.Error(), "code": code, "fatal": fatal,
		"abortable": !fatal}
}

func main() {
	var cfg config
	if err := json.Unmarshal([]byte(os.Args[1]), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bad config:", err)
		os.Exit(2)
	}
	w := &worker{cfg: cfg}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	enc := json.NewEncoder(os.Stdout)
	for in.Scan() {
		if len(in.Bytes()) == 0 {
			continue
		}
		var c command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			_ = enc.Encode(answer(nil, err))
			continue
		}
		_ = enc.Encode(answer(w.run(c)))
		if c.Op == "close" {
			return
		}
	}
}
