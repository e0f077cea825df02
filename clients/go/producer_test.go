package rmq_test

// Producing and steering by key against a real server: each option of each
// kind reaches Redis, a lookup tells the state, cancel and reschedule act
// on one key, and bad input or a bad token is a typed error that changes
// nothing.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	rmq "rmq/clients/go"
)

// must is v, or a panic (which fails the test) on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func topicStats(t *testing.T, c *rmq.Client, name string) map[string]float64 {
	t.Helper()
	var out struct {
		Total map[string]float64 `json:"total"`
	}
	if err := c.Do(context.Background(), "GET", "/topics/"+name+"/stats", nil, nil, &out); err != nil {
		t.Fatal(err)
	}
	return out.Total
}

func TestFixedTimeMessagesMergeByKeyAndAreSteeredByKey(t *testing.T) {
	ctx := context.Background()
	_, _, tp := newTopic(t, "fixed-time", map[string]any{"slots": 4})
	first := must(tp.Send(ctx, "unpaid", rmq.Key("order-1"), rmq.Delay(time.Minute)))
	if first.Merged {
		t.Fatal("a first send merged")
	}
	again := must(tp.Send(ctx, "unpaid, again", rmq.Key("order-1"), rmq.Delay(2*time.Minute)))
	if !again.Merged {
		t.Fatal("a second send of a pending key merges")
	}
	info := must(tp.Get(ctx, "order-1"))
	if info.State != "pending" || string(info.Payload) != "unpaid, again" || *info.DueMs != *again.DueMs {
		t.Fatalf("%+v", info)
	}
	moved := must(tp.Reschedule(ctx, "order-1", rmq.Schedule{Delay: 5 * time.Second}))
	if !moved.Rescheduled || *moved.DueMs >= *again.DueMs {
		t.Fatalf("%+v", moved)
	}
	if !must(tp.Cancel(ctx, "order-1")).Cancelled {
		t.Fatal("not cancelled")
	}
	if must(tp.Get(ctx, "order-1")).Exists() {
		t.Fatal("still there")
	}
	if must(tp.Cancel(ctx, "order-1")).Cancelled {
		t.Fatal("nothing left to cancel")
	}
}

func TestABatchSendsEveryOptionAndSlotBasisKeepsOneSlot(t *testing.T) {
	ctx := context.Background()
	_, _, tp := newTopic(t, "priority", map[string]any{"slots": 2})
	batch := make([]rmq.Message, 100)
	for i := range batch {
		batch[i] = rmq.NewMessage(fmt.Sprintf("m%d", i), rmq.Key(fmt.Sprintf("k%d", i)), rmq.Priority(uint32(i)))
	}
	sent := must(tp.SendBatch(ctx, batch))
	for i, r := range sent {
		if r.Err != nil || r.Merged || *r.Priority != uint32(i) {
			t.Fatalf("%d: %+v", i, r)
		}
	}
	if info := must(tp.Get(ctx, "k7")); info.State != "pending" || *info.Priority != 7 {
		t.Fatalf("%+v", info)
	}
	cancelled := must(tp.CancelMany(ctx, []string{"k1", "k2", "nope"}))
	if !cancelled[0].Cancelled || !cancelled[1].Cancelled || cancelled[2].Cancelled {
		t.Fatalf("%+v", cancelled)
	}
	a := must(tp.Send(ctx, "x", rmq.Key("a"), rmq.Priority(1), rmq.SlotBasis("entity-9")))
	b := must(tp.Send(ctx, "y", rmq.Key("b"), rmq.Priority(1), rmq.SlotBasis("entity-9")))
	if a.Slot != b.Slot {
		t.Fatal("one slot basis, one slot")
	}
	if !must(tp.Get(ctx, "a", rmq.BySlotBasis("entity-9"))).Exists() {
		t.Fatal("not found by its slot basis")
	}
}

func TestABatchReportsAMessageRefusedOnItsOwn(t *testing.T) {
	ctx := context.Background()
	_, _, tp := newTopic(t, "fixed-time", map[string]any{"slots": 1})
	sent := must(tp.SendBatch(ctx, []rmq.Message{
		rmq.NewMessage("ok", rmq.Key("a"), rmq.Delay(time.Second)),
		rmq.NewMessage("late", rmq.Key("b"), rmq.At(time.Now().Add(-time.Hour))),
	}))
	if sent[0].Err != nil || sent[1].Err == nil || sent[1].Err.Kind != "PastDue" {
		t.Fatalf("%+v %+v", sent[0], sent[1])
	}
	if !must(tp.Get(ctx, "a")).Exists() || must(tp.Get(ctx, "b")).Exists() {
		t.Fatal("a is sent, b is not")
	}
}

func TestRangeMergeKeepsTheFirstDueTimeAndTheNewestPayload(t *testing.T) {
	ctx := context.Background()
	_, _, tp := newTopic(t, "range-merge", map[string]any{"slots": 1})
	a := must(tp.Send(ctx, "v1", rmq.Key("r"), rmq.Range(time.Minute)))
	b := must(tp.Send(ctx, "v2", rmq.Key("r"), rmq.Range(time.Minute)))
	if !b.Merged || *b.DueMs != *a.DueMs {
		t.Fatalf("%+v %+v", a, b)
	}
	if string(must(tp.Get(ctx, "r")).Payload) != "v2" {
		t.Fatal("the newest payload wins")
	}
}

func TestBadInputAndABadTokenAreTypedErrorsThatChangeNothing(t *testing.T) {
	ctx := context.Background()
	s, c, tp := newTopic(t, "priority", map[string]any{"slots": 1})
	_, err := tp.Send(ctx, "x", rmq.Delay(10*time.Millisecond))
	var e *rmq.Error
	if !errors.Is(err, rmq.ErrBadRequest) || !errors.As(err, &e) || e.Status != 400 || e.Kind == "" {
		t.Fatalf("a priority topic has no due time: %v", err)
	}
	if _, err := c.Topic("no-such-topic").Send(ctx, "x", rmq.Priority(1)); !errors.Is(err, rmq.ErrNotFound) {
		t.Fatalf("%v", err)
	}
	if _, err := tp.Take(ctx, 0, rmq.TakeOptions{}); !errors.Is(err, rmq.ErrBadRequest) {
		t.Fatalf("%v", err)
	}
	if n := topicStats(t, c, tp.Name)["pending"]; n != 0 {
		t.Fatalf("pending %v", n)
	}
	bad := rmq.New(s.url(), rmq.WithToken("wrong-token-wrong-token")).Topic(tp.Name)
	if _, err := bad.Send(ctx, "x", rmq.Priority(1)); !errors.Is(err, rmq.ErrUnauthorized) || !errors.As(err, &e) || e.Kind != "Unauthorized" {
		t.Fatalf("%v", err)
	}
	if _, err := bad.Take(ctx, 1, rmq.TakeOptions{}); !errors.Is(err, rmq.ErrUnauthorized) {
		t.Fatalf("%v", err)
	}
	down := rmq.New(fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), rmq.WithToken(token))
	if _, err := down.Topic(tp.Name).Send(ctx, "x", rmq.Priority(1)); !errors.Is(err, rmq.ErrConnectionFailed) {
		t.Fatalf("%v", err)
	}
}
