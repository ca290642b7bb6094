// Group consumer harness for franz-go (kgo's own group code: the cooperative-sticky balancer
// over the classic protocol, or KIP-848 with the server-side balancer).
//
//	franz-worker CONFIG_JSON
//
// CONFIG_JSON is the one every harness takes (tests/groups/README.md). Rebalances are blocked
// while a polled batch is processed (BlockRebalanceOnPoll), so a batch is always reported and
// committed by the member that owns it; a failed commit stays pending and is retried with the
// next batch or in the revoke callback. SIGTERM: stop polling, commit what is pending, close
// (which leaves the group unless the member is static).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type config struct {
	Bootstrap        string  `json:"bootstrap"`
	Topic            string  `json:"topic"`
	Group            string  `json:"group"`
	Member           string  `json:"member"`
	Report           string  `json:"report"`
	Strategy         string  `json:"strategy"`
	InstanceID       *string `json:"instance_id"`
	SessionTimeoutMs int     `json:"session_timeout_ms"`
	HeartbeatMs      int     `json:"heartbeat_interval_ms"`
	MetadataMaxAgeMs int     `json:"metadata_max_age_ms"`
	MaxPollRecords   int     `json:"max_poll_records"`
}

type worker struct {
	cfg     config
	mu      sync.Mutex // serializes report lines and guards pending
	out     *os.File
	cl      *kgo.Client
	pending map[int32]int64 // partition -> next offset to commit
}

func (w *worker) report(ev string, fields map[string]any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reportLocked(ev, fields)
}

func (w *worker) reportLocked(ev string, fields map[string]any) {
	if fields == nil {
		fields = map[string]any{}
	}
	fields["ev"], fields["member"], fields["ts"] = ev, w.cfg.Member, time.Now().UnixMilli()
	line, err := json.Marshal(fields)
	if err != nil {
		panic(err) // only plain maps of numbers and strings are marshalled
	}
	// one write per line: a SIGKILL loses at most the line being written
	if _, err := w.out.Write(append(line, '\n')); err != nil {
		fmt.Fprintln(os.Stderr, "cannot write the report:", err)
		os.Exit(1)
	}
}

func (w *worker) gen() int32 {
	_, g := w.cl.GroupMetadata()
	return g
}

func sorted(ps []int32) []int32 {
	out := append([]int32(nil), ps...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// commit commits the pending offsets of parts (all pending when parts is nil), synchronously.
func (w *worker) commit(ctx context.Context, parts []int32) {
	w.mu.Lock()
	offs := map[int32]kgo.EpochOffset{}
	for p, o := range w.pending {
		if parts == nil || contains(parts, p) {
			offs[p] = kgo.EpochOffset{Epoch: -1, Offset: o}
		}
	}
	w.mu.Unlock()
	if len(offs) == 0 {
		return
	}
	var cerr error
	w.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{w.cfg.Topic: offs},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				cerr = err
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if e := kerr.ErrorForCode(p.ErrorCode); e != nil && cerr == nil {
						cerr = e
					}
				}
			}
		})
	if cerr != nil {
		// e.g. a rebalance in progress: the offsets stay pending and are committed later
		w.report("commit_failed", map[string]any{"error": cerr.Error()})
		return
	}
	w.mu.Lock()
	done := map[string]int64{}
	for p, eo := range offs {
		done[fmt.Sprint(p)] = eo.Offset
		if w.pending[p] == eo.Offset {
			delete(w.pending, p)
		}
	}
	w.reportLocked("commit", map[string]any{"gen": w.gen(), "offsets": done})
	w.mu.Unlock()
}

func contains(ps []int32, p int32) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

func (w *worker) drop(parts []int32) {
	w.mu.Lock()
	for _, p := range parts {
		delete(w.pending, p)
	}
	w.mu.Unlock()
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: franz-worker CONFIG_JSON")
		os.Exit(2)
	}
	var cfg config
	if err := json.Unmarshal([]byte(os.Args[1]), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bad CONFIG_JSON:", err)
		os.Exit(2)
	}
	out, err := os.OpenFile(cfg.Report, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot open the report:", err)
		os.Exit(1)
	}
	w := &worker{cfg: cfg, out: out, pending: map[int32]int64{}}
	topic := cfg.Topic
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Bootstrap),
		kgo.ClientID(cfg.Member),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.MetadataMaxAge(time.Duration(cfg.MetadataMaxAgeMs) * time.Millisecond),
		kgo.MetadataMinAge(time.Duration(cfg.MetadataMaxAgeMs) * time.Millisecond / 2),
		kgo.FetchMaxWait(200 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if ps := m[topic]; len(ps) > 0 {
				w.report("assigned", map[string]any{"gen": w.gen(), "partitions": sorted(ps)})
			}
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) {
			if ps := m[topic]; len(ps) > 0 {
				w.commit(ctx, ps)
				w.drop(ps)
				w.report("revoked", map[string]any{"partitions": sorted(ps)})
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if ps := m[topic]; len(ps) > 0 {
				w.drop(ps)
				w.report("lost", map[string]any{"partitions": sorted(ps)})
			}
		}),
	}
	switch cfg.Strategy {
	case "cooperative-sticky":
		opts = append(opts, kgo.Balancers(kgo.CooperativeStickyBalancer()),
			kgo.SessionTimeout(time.Duration(cfg.SessionTimeoutMs)*time.Millisecond),
			kgo.HeartbeatInterval(time.Duration(cfg.HeartbeatMs)*time.Millisecond))
	case "consumer":
		// KIP-848: the broker assigns (its default assignor); session and heartbeat are the
		// broker's configs
		opts = append(opts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer()))
	default:
		fmt.Fprintln(os.Stderr, "unsupported strategy", cfg.Strategy)
		os.Exit(2)
	}
	if cfg.InstanceID != nil {
		opts = append(opts, kgo.InstanceID(*cfg.InstanceID))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kgo.NewClient:", err)
		os.Exit(1)
	}
	w.cl = cl
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	w.report("start", nil)
	lastGen := int32(-2)
	for ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollRecords(pctx, cfg.MaxPollRecords)
		pcancel()
		if g := w.gen(); g != lastGen {
			lastGen = g // a generation change that came with no callback
			w.report("generation", map[string]any{"gen": g})
		}
		fs.EachRecord(func(r *kgo.Record) {
			w.mu.Lock()
			w.reportLocked("record", map[string]any{"gen": w.gen(), "partition": r.Partition,
				"offset": r.Offset, "key": string(r.Key)})
			w.pending[r.Partition] = r.Offset + 1
			w.mu.Unlock()
		})
		w.commit(context.Background(), nil)
		cl.AllowRebalance()
	}
	w.report("closing", nil)
	w.commit(context.Background(), nil)
	cl.CloseAllowingRebalance()
	w.report("closed", nil)
}
