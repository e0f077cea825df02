package rmq_test

// The worker against a real server: every message handled once at
// concurrency 16, retries and dead letters by what the handler returns, a
// handler past its timeout retried, a long handler kept by its lease, a stop
// that gives back what did not finish, serial mode one message of an entity
// at a time and in order across two workers, and a server restart in the
// middle of a run with nothing lost.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rmq "rmq/clients/go"
)

func fill(t *testing.T, tp *rmq.Topic, n int, opts ...rmq.SendOption) {
	t.Helper()
	for start := 0; start < n; start += 1000 {
		var batch []rmq.Message
		for i := start; i < n && i < start+1000; i++ {
			batch = append(batch, rmq.NewMessage(fmt.Sprintf("m%d", i), append([]rmq.SendOption{rmq.Key(fmt.Sprintf("k%d", i))}, opts...)...))
		}
		must(tp.SendBatch(context.Background(), batch))
	}
}

func until(t *testing.T, what string, timeout time.Duration, check func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !check() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// counter counts handled keys.
type counter struct {
	mu   sync.Mutex
	seen map[string]int
}

func (c *counter) add(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]int{}
	}
	c.seen[k]++
	return len(c.seen)
}

func (c *counter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.seen {
		out[k] = v
	}
	return out
}

func TestFiveThousandMessagesAtConcurrency16AreEachHandledOnce(t *testing.T) {
	_, c, tp := newTopic(t, "priority", map[string]any{"slots": 16})
	fill(t, tp, 5000, rmq.Priority(1))
	var seen counter
	var running, peak int64
	ctx, stop := context.WithCancel(context.Background())
	w := tp.Worker(func(_ context.Context, d rmq.Delivery) error {
		n := atomic.AddInt64(&running, 1)
		for p := atomic.LoadInt64(&peak); n > p && !atomic.CompareAndSwapInt64(&peak, p, n); p = atomic.LoadInt64(&peak) {
		}
		time.Sleep(time.Millisecond)
		atomic.AddInt64(&running, -1)
		if seen.add(string(d.Key)) == 5000 {
			stop()
		}
		return nil
	}, rmq.WorkerOptions{Concurrency: 16, Wait: time.Second})
	report := must(w.Run(ctx))
	if report.Acked != 5000 {
		t.Fatalf("%+v", report)
	}
	all := seen.snapshot()
	if len(all) != 5000 {
		t.Fatalf("%d handled", len(all))
	}
	for k, n := range all {
		if n != 1 {
			t.Fatalf("%s handled %d times", k, n)
		}
	}
	if peak <= 1 || peak > 16 {
		t.Fatalf("peak %d", peak)
	}
	if st := topicStats(t, c, tp.Name); st["pending"] != 0 || st["in_flight"] != 0 {
		t.Fatalf("%v", st)
	}
}

func TestFailuresRetryAndDeadLetterByWhatTheHandlerReturns(t *testing.T) {
	bg := context.Background()
	_, c, tp := newTopic(t, "priority", map[string]any{"slots": 2, "max_attempts": 3, "backoff_ms": 10, "backoff_max_ms": 20})
	for _, k := range []string{"flaky", "poison", "later", "always-fails"} {
		must(tp.Send(bg, k, rmq.Key(k), rmq.Priority(1)))
	}
	var attempts, ended counter
	ctx, stop := context.WithCancel(bg)
	w := tp.Worker(func(_ context.Context, d rmq.Delivery) error {
		k := string(d.Key)
		attempts.add(k)
		switch {
		case k == "flaky" && d.Attempt < 2:
			return errors.New("not yet")
		case k == "poison":
			return rmq.DeadLetter("cannot parse")
		case k == "always-fails":
			return fmt.Errorf("attempt %d failed", d.Attempt)
		case k == "later" && d.Attempt == 1:
			return rmq.RetryAfter("come back", 10*time.Millisecond)
		}
		ended.add(k)
		return nil
	}, rmq.WorkerOptions{Concurrency: 4, Wait: 200 * time.Millisecond})
	go func() {
		until(t, "the ends", 20*time.Second, func() bool {
			e, a := ended.snapshot(), attempts.snapshot()
			return e["flaky"] == 1 && e["later"] == 1 && a["always-fails"] == 3
		})
		time.Sleep(200 * time.Millisecond)
		stop()
	}()
	report := must(w.Run(ctx))
	a := attempts.snapshot()
	if a["flaky"] != 2 || a["later"] != 2 || a["poison"] != 1 || a["always-fails"] != 3 {
		t.Fatalf("%v", a)
	}
	if report.Acked != 2 || report.Dead != 2 {
		t.Fatalf("%+v", report)
	}
	var dead struct {
		Dead []struct {
			Key   string `json:"key"`
			Error string `json:"error"`
		} `json:"dead"`
	}
	if err := c.Do(bg, "GET", "/topics/"+tp.Name+"/dead", nil, nil, &dead); err != nil {
		t.Fatal(err)
	}
	errs := map[string]string{}
	for _, l := range dead.Dead {
		errs[l.Key] = l.Error
	}
	if errs["poison"] != "cannot parse" || errs["always-fails"] != "attempt 3 failed" {
		t.Fatalf("%v", errs)
	}
}

func TestAHandlerPastItsTimeoutIsCancelledAndRetried(t *testing.T) {
	bg := context.Background()
	_, _, tp := newTopic(t, "priority", map[string]any{"slots": 1, "backoff_ms": 60000})
	must(tp.Send(bg, "slow", rmq.Key("slow"), rmq.Priority(1)))
	var cancelled atomic.Bool
	ctx, stop := context.WithCancel(bg)
	w := tp.Worker(func(ctx context.Context, _ rmq.Delivery) error {
		select {
		case <-ctx.Done():
			cancelled.Store(true)
			return ctx.Err()
		case <-time.After(30 * time.Second):
			return nil
		}
	}, rmq.WorkerOptions{Concurrency: 1, HandlerTimeout: 300 * time.Millisecond, Wait: 200 * time.Millisecond})
	go func() {
		until(t, "the cancel", 10*time.Second, cancelled.Load)
		time.Sleep(300 * time.Millisecond)
		stop()
	}()
	report := must(w.Run(ctx))
	if report.Retried != 1 {
		t.Fatalf("%+v", report)
	}
	info := must(tp.Get(bg, "slow"))
	if info.State != "retry-waiting" || info.Error != "handler timed out after 300ms" {
		t.Fatalf("%+v", info)
	}
}

func TestALongHandlerKeepsItsDeliveryByExtendingTheLease(t *testing.T) {
	bg := context.Background()
	_, _, tp := newTopic(t, "priority", map[string]any{"slots": 1})
	must(tp.Send(bg, "long", rmq.Key("long"), rmq.Priority(1)))
	var handled []uint32
	var mu sync.Mutex
	ctx, stop := context.WithCancel(bg)
	w := tp.Worker(func(_ context.Context, d rmq.Delivery) error {
		mu.Lock()
		handled = append(handled, d.Attempt)
		mu.Unlock()
		time.Sleep(2 * time.Second) // over three leases of 600 ms
		stop()
		return nil
	}, rmq.WorkerOptions{Concurrency: 2, Lease: 600 * time.Millisecond, Wait: 200 * time.Millisecond})
	report := must(w.Run(ctx))
	if len(handled) != 1 || handled[0] != 1 || report.Acked != 1 {
		t.Fatalf("never taken again while held: %v %+v", handled, report)
	}
}

func TestStopWaitsForRunningHandlersAndGivesBackTheRestUntouched(t *testing.T) {
	bg := context.Background()
	_, c, tp := newTopic(t, "priority", map[string]any{"slots": 4})
	fill(t, tp, 6, rmq.Priority(1))
	var started int64
	ctx, stop := context.WithCancel(bg)
	w := tp.Worker(func(hctx context.Context, _ rmq.Delivery) error {
		if atomic.AddInt64(&started, 1) == 1 {
			time.Sleep(300 * time.Millisecond) // finishes within the grace
			return nil
		}
		<-hctx.Done() // does not
		return hctx.Err()
	}, rmq.WorkerOptions{Concurrency: 3, ShutdownGrace: time.Second, Wait: 200 * time.Millisecond})
	var t0 time.Time
	go func() {
		until(t, "three handlers", 10*time.Second, func() bool { return atomic.LoadInt64(&started) >= 3 })
		t0 = time.Now()
		stop()
	}()
	report := must(w.Run(ctx))
	if time.Since(t0) > 3*time.Second {
		t.Fatal("the grace bounds the stop")
	}
	if report.Acked != 1 || report.Released != 2 {
		t.Fatalf("%+v", report)
	}
	if st := topicStats(t, c, tp.Name); st["pending"] != 5 || st["in_flight"] != 0 || st["retry_waiting"] != 0 {
		t.Fatalf("%v", st)
	}
	for _, d := range must(tp.Take(bg, 5, rmq.TakeOptions{})) {
		if d.Attempt != 1 {
			t.Fatalf("a release counts no attempt: %+v", d)
		}
	}
}

func TestSerialModeHandlesOneMessageOfAnEntityAtATimeInOrder(t *testing.T) {
	bg := context.Background()
	_, _, tp := newTopic(t, "fixed-time", map[string]any{"slots": 8, "past_tolerance_ms": 600000})
	const entities, per = 6, 25
	base := time.Now().Add(-time.Minute)
	var batch []rmq.Message
	for i := 0; i < per; i++ {
		for e := 0; e < entities; e++ {
			batch = append(batch, rmq.NewMessage(fmt.Sprintf("%d:%d", e, i), rmq.Key(fmt.Sprintf("e%d-%d", e, i)),
				rmq.At(base.Add(time.Duration(i)*time.Millisecond)), rmq.SlotBasis(fmt.Sprintf("entity-%d", e))))
		}
	}
	for _, r := range must(tp.SendBatch(bg, batch)) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	type entry struct {
		e, i       int
		start, end time.Time
		w          int
	}
	var mu sync.Mutex
	var log []entry
	ctx, stop := context.WithCancel(bg)
	handler := func(worker int) rmq.Handler {
		return func(_ context.Context, d rmq.Delivery) error {
			var e, i int
			fmt.Sscanf(strings.Replace(string(d.Payload), ":", " ", 1), "%d %d", &e, &i)
			start := time.Now()
			time.Sleep(2 * time.Millisecond)
			mu.Lock()
			log = append(log, entry{e, i, start, time.Now(), worker})
			if len(log) == entities*per {
				stop()
			}
			mu.Unlock()
			return nil
		}
	}
	var wg sync.WaitGroup
	reports := make([]rmq.Report, 2)
	for n := 0; n < 2; n++ {
		w := tp.Worker(handler(n+1), rmq.WorkerOptions{Concurrency: 8, Group: "g", Member: fmt.Sprintf("w%d", n+1),
			Wait: 200 * time.Millisecond, MemberTimeout: 2 * time.Second})
		wg.Add(1)
		go func(n int) {
			defer wg.Done()
			reports[n] = must(w.Run(ctx))
		}(n)
	}
	wg.Wait()
	if reports[0].Acked+reports[1].Acked != entities*per {
		t.Fatalf("%+v", reports)
	}
	workers := map[int]bool{}
	for e := 0; e < entities; e++ {
		var mine []entry
		for _, x := range log {
			workers[x.w] = true
			if x.e == e {
				mine = append(mine, x)
			}
		}
		sort.Slice(mine, func(a, b int) bool { return mine[a].start.Before(mine[b].start) })
		for k, x := range mine {
			if x.i != k {
				t.Fatalf("entity %d out of order at %d: %d", e, k, x.i)
			}
			if k > 0 && mine[k-1].end.After(x.start) {
				t.Fatalf("entity %d: %d overlaps %d", e, k-1, k)
			}
		}
	}
	if !workers[1] || !workers[2] {
		t.Fatal("both members worked")
	}
}

func TestAServerRestartInTheMiddleOfARunLosesNothing(t *testing.T) {
	s := startServer(t)
	bg := context.Background()
	c := rmq.New(s.url(), rmq.WithToken(token), rmq.WithTimeout(5*time.Second))
	name := topicName()
	must(c.CreateTopic(bg, name, "priority", map[string]any{"slots": 8, "lease_ms": 3000}))
	tp := c.Topic(name)
	const n = 2000
	fill(t, tp, n, rmq.Priority(1))
	var seen counter
	ctx, stop := context.WithCancel(bg)
	w := tp.Worker(func(_ context.Context, d rmq.Delivery) error {
		time.Sleep(time.Millisecond)
		seen.add(string(d.Key))
		return nil
	}, rmq.WorkerOptions{Concurrency: 16, Wait: 500 * time.Millisecond, Logf: func(string, ...any) {}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		must(w.Run(ctx))
	}()
	until(t, "a third", 30*time.Second, func() bool { return len(seen.snapshot()) >= n/3 })
	s.restart()
	until(t, "every message", 60*time.Second, func() bool {
		if len(seen.snapshot()) < n {
			return false
		}
		var out struct {
			Total map[string]float64 `json:"total"`
		}
		if c.Do(bg, "GET", "/topics/"+tp.Name+"/stats", nil, nil, &out) != nil {
			return false
		}
		return out.Total["pending"] == 0 && out.Total["in_flight"] == 0
	})
	stop()
	<-done
	all := seen.snapshot()
	total := 0
	for _, v := range all {
		total += v
	}
	if len(all) != n || total-n > 32 {
		t.Fatalf("%d handled, %d extra", len(all), total-n)
	}
	if st := topicStats(t, c, tp.Name); st["pending"] != 0 || st["in_flight"] != 0 || st["dead"] != 0 {
		t.Fatalf("%v", st)
	}
}
