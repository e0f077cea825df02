package rmq

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"time"
)

// Handler handles one delivery. Returning nil acks the message; an error
// made by DeadLetter sends it to the dead letters; one made by RetryAfter
// retries it after its delay; any other error retries it after the
// worker's RetryDelay (the topic's backoff when 0), with the error as the
// message's, and the topic's last attempt goes to the dead letters. ctx is
// cancelled past the handler timeout, when the lease is lost, and at a stop
// past the grace: a handler should return then.
type Handler func(ctx context.Context, d Delivery) error

// DeadLetterError sends a message to the dead letters (see DeadLetter).
type DeadLetterError struct{ Reason string }

func (e *DeadLetterError) Error() string { return e.Reason }

// DeadLetter is the error a handler returns to send its message straight to
// the dead letters, with reason.
func DeadLetter(reason string) error { return &DeadLetterError{Reason: reason} }

// RetryError retries a message after a delay (see RetryAfter).
type RetryError struct {
	Reason string
	After  time.Duration
}

func (e *RetryError) Error() string { return e.Reason }

// RetryAfter is the error a handler returns to retry its message after
// after (the worker's RetryDelay when 0).
func RetryAfter(reason string, after time.Duration) error {
	return &RetryError{Reason: reason, After: after}
}

// WorkerOptions configure a Worker; the zero value of each is its default.
type WorkerOptions struct {
	// Concurrency is how many handlers run at once (default 16).
	Concurrency int
	// Batch caps how many messages one take asks for (default: the free room).
	Batch int
	// Wait is how long one take waits for work (default 20 s).
	Wait time.Duration
	// Lease is each delivery's lease (default: the topic's).
	Lease time.Duration
	// HandlerTimeout is how long a handler may run (default: no limit).
	HandlerTimeout time.Duration
	// RetryDelay is the delay of a failure's retry (default: the topic's backoff).
	RetryDelay time.Duration
	// Group and Member: serial mode (Member defaults to host-pid-random).
	Group, Member string
	// MemberTimeout: serial mode; a member silent this long is gone.
	MemberTimeout time.Duration
	// ShutdownGrace is how long a stop waits for running handlers (default 30 s).
	ShutdownGrace time.Duration
	// SettleRetryFor is how long a settle is tried again while the server is
	// away (default 30 s).
	SettleRetryFor time.Duration
	// Logf logs what goes wrong (default log.Printf).
	Logf func(format string, args ...any)
}

// Report counts how a worker's deliveries ended.
type Report struct {
	Acked, Retried, Dead, Released, Cancelled int
	// Superseded: a duplicate sent while it was in flight took its place.
	Superseded int
	// Lost: the lease was lost while the handler ran (nothing settled).
	Lost int
	// NotSettled: refused as stale, or the server stayed away; the message
	// comes back after its lease.
	NotSettled int
	Outcomes   map[string]int
}

func (r *Report) count(s Settlement) {
	r.Outcomes[s.Outcome]++
	switch s.Outcome {
	case "acked":
		r.Acked++
	case "retrying":
		r.Retried++
	case "dead":
		r.Dead++
	case "released":
		r.Released++
	case "cancelled":
		r.Cancelled++
	case "superseded":
		r.Superseded++
	default:
		r.NotSettled++
	}
}

// Worker runs a handler on every message of one topic: it long-polls Take
// for as many messages as it has room for, runs up to Concurrency handlers
// at once, extends each delivery's lease every third of it while its
// handler runs, and settles each by what the handler returned (acks and
// releases of many handlers go out together). Run stops when its context is
// cancelled: it stops taking, waits up to ShutdownGrace for running
// handlers, cancels the contexts of those still running and gives their
// messages back untouched (release: no attempt counted). Go cannot stop a
// goroutine: a handler that ignores its context runs on while its end is
// recorded.
type Worker struct {
	topic   *Topic
	handler Handler
	o       WorkerOptions

	mu     sync.Mutex
	report Report

	running int64
	freed   chan struct{}

	handlers    context.Context
	abandon     context.CancelFunc
	wg          sync.WaitGroup
	settler     *settler
	settlerDone chan struct{}
}

// Worker is a worker running h on this topic's messages.
func (t *Topic) Worker(h Handler, o WorkerOptions) *Worker {
	if o.Concurrency < 1 {
		o.Concurrency = 16
	}
	if o.Wait == 0 {
		o.Wait = 20 * time.Second
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = 30 * time.Second
	}
	if o.SettleRetryFor == 0 {
		o.SettleRetryFor = 30 * time.Second
	}
	if o.Logf == nil {
		o.Logf = log.Printf
	}
	if o.Group != "" && o.Member == "" {
		o.Member = DefaultMember()
	}
	return &Worker{topic: t, handler: h, o: o, freed: make(chan struct{}, 1), report: Report{Outcomes: map[string]int{}}}
}

// Report is how the deliveries ended so far.
func (w *Worker) Report() Report {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.report
	r.Outcomes = map[string]int{}
	for k, v := range w.report.Outcomes {
		r.Outcomes[k] = v
	}
	return r
}

// Run takes and handles messages until ctx is cancelled; then it stops as
// the type's docs say and returns the counts. It returns an error (after
// giving back what it holds) when taking cannot work: a wrong token, no
// such topic, a bad option.
func (w *Worker) Run(ctx context.Context) (Report, error) {
	if w.o.Member != "" && w.o.Group == "" {
		return w.Report(), errors.New("rmq: a member needs a group (serial mode)")
	}
	w.handlers, w.abandon = context.WithCancel(context.Background())
	defer w.abandon()
	w.settler = newSettler(w.topic, w.o.SettleRetryFor)
	w.settlerDone = make(chan struct{})
	go func() {
		w.settler.run()
		close(w.settlerDone)
	}()
	err := w.takeUntilStopped(ctx)
	w.finishRunning()
	w.settler.close()
	<-w.settlerDone
	return w.Report(), err
}

func (w *Worker) takeUntilStopped(ctx context.Context) error {
	pause := 50 * time.Millisecond
	for ctx.Err() == nil {
		free := w.o.Concurrency - int(atomic.LoadInt64(&w.running))
		if free <= 0 {
			select {
			case <-w.freed:
			case <-ctx.Done():
			}
			continue
		}
		want := free
		if w.o.Batch > 0 && w.o.Batch < want {
			want = w.o.Batch
		}
		if want > MaxTake {
			want = MaxTake
		}
		taken, err := w.topic.Take(ctx, want, TakeOptions{
			Wait: w.o.Wait, Lease: w.o.Lease, Group: w.o.Group, Member: w.o.Member, MemberTimeout: w.o.MemberTimeout,
		})
		if ctx.Err() != nil {
			// Stopped while waiting: the server gives back what it took for us.
			w.giveBack(taken)
			return nil
		}
		if err != nil {
			if fatal(err) {
				return err
			}
			w.o.Logf("rmq: taking from %s failed, trying again in %v: %v", w.topic.Name, pause, err)
			select {
			case <-time.After(pause):
			case <-ctx.Done():
			}
			if pause *= 2; pause > 5*time.Second {
				pause = 5 * time.Second
			}
			continue
		}
		pause = 50 * time.Millisecond
		for _, d := range taken {
			atomic.AddInt64(&w.running, 1)
			w.wg.Add(1)
			go w.handle(d)
		}
	}
	return nil
}

func (w *Worker) giveBack(taken []Delivery) {
	for _, d := range taken {
		w.end(d, ending{op: "release"})
	}
}

// ending is how a delivery ends: a settle operation and its extra fields.
type ending struct {
	op     string
	reason string
	after  time.Duration
}

func (w *Worker) handle(d Delivery) {
	defer func() {
		atomic.AddInt64(&w.running, -1)
		select {
		case w.freed <- struct{}{}:
		default:
		}
		w.wg.Done()
	}()
	ctx, cancel := context.WithCancel(w.handlers)
	defer cancel()
	if w.o.HandlerTimeout > 0 {
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeout(ctx, w.o.HandlerTimeout)
		defer cancelT()
	}
	var lost atomic.Bool
	stopKeeping := make(chan struct{})
	kept := make(chan struct{})
	go func() {
		w.keepLease(d, stopKeeping, &lost, cancel)
		close(kept)
	}()
	result := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				result <- fmt.Errorf("panic: %v", p)
			}
		}()
		result <- w.handler(ctx, d)
	}()
	var end *ending
	select {
	case err := <-result:
		if !lost.Load() {
			e := w.judge(err)
			end = &e
		}
	case <-ctx.Done():
		switch {
		case lost.Load():
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			end = &ending{op: "nack", reason: fmt.Sprintf("handler timed out after %v", w.o.HandlerTimeout), after: w.o.RetryDelay}
		default: // the stop's grace ran out
			end = &ending{op: "release"}
		}
	}
	close(stopKeeping)
	<-kept
	if end == nil {
		w.mu.Lock()
		w.report.Lost++
		w.mu.Unlock()
		return
	}
	w.end(d, *end)
}

// judge is how a handler's return ends its delivery.
func (w *Worker) judge(err error) ending {
	var dead *DeadLetterError
	var retry *RetryError
	switch {
	case err == nil:
		return ending{op: "ack"}
	case errors.As(err, &dead):
		return ending{op: "dead", reason: dead.Reason}
	case errors.As(err, &retry):
		after := retry.After
		if after == 0 {
			after = w.o.RetryDelay
		}
		return ending{op: "nack", reason: retry.Reason, after: after}
	default:
		return ending{op: "nack", reason: err.Error(), after: w.o.RetryDelay}
	}
}

func (w *Worker) end(d Delivery, e ending) {
	if len(e.reason) > 4096 {
		e.reason = e.reason[:4096]
	}
	s := w.settler.settle(e, d.Receipt)
	w.mu.Lock()
	w.report.count(s)
	w.mu.Unlock()
	if !s.Done() {
		w.o.Logf("rmq: %s of %q on %s: %s %s", e.op, d.Key, d.Topic, s.Outcome, s.Error)
	}
}

// keepLease extends the lease every third of it until stop; a lease that is
// not the delivery's any more cancels the handler.
func (w *Worker) keepLease(d Delivery, stop <-chan struct{}, lost *atomic.Bool, cancel context.CancelFunc) {
	lease := time.Duration(d.LeaseUntilMs-d.TakenMs) * time.Millisecond
	if lease <= 0 {
		lease = time.Millisecond
	}
	every := lease / 3
	if every < 50*time.Millisecond {
		every = 50 * time.Millisecond
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		ctx, done := context.WithTimeout(context.Background(), lease)
		s, err := w.topic.Extend(ctx, lease, d.Receipt)
		done()
		if err != nil || len(s) != 1 {
			continue // tries again at the next tick
		}
		if s[0].Outcome == "stale" || s[0].Outcome == "fenced" {
			lost.Store(true)
			cancel()
			return
		}
	}
}

// finishRunning waits up to the grace for running handlers, then cancels
// the contexts of those still running (their messages are given back).
func (w *Worker) finishRunning() {
	done := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-time.After(w.o.ShutdownGrace):
	}
	w.abandon()
	<-done
}

var memberChars = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// DefaultMember is host-pid-random, in the characters a member id may hold.
func DefaultMember() string {
	host, _ := os.Hostname()
	raw := fmt.Sprintf("%s-%d-%08x", host, os.Getpid(), rand.Uint32())
	raw = memberChars.ReplaceAllString(raw, "-")
	if len(raw) > 100 {
		raw = raw[len(raw)-100:]
	}
	return raw
}
