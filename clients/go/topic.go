package rmq

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Topic is one topic of a Client. It is safe for concurrent use.
type Topic struct {
	client *Client
	// Name is the topic's name.
	Name string
	path string
}

// Send sends one message.
func (t *Topic) Send(ctx context.Context, payload string, opts ...SendOption) (Sent, error) {
	var out Sent
	err := t.client.Do(ctx, http.MethodPost, t.path+"/messages", nil, NewMessage(payload, opts...).body(), &out)
	return out, err
}

// SendBatch sends up to 10,000 messages in one request, one result each in
// order. A malformed message refuses the whole batch (an error, nothing
// sent); one that Redis refuses on its own has its result's Err set while
// the others are sent.
func (t *Topic) SendBatch(ctx context.Context, messages []Message) ([]Sent, error) {
	if len(messages) < 1 || len(messages) > MaxSendBatch {
		return nil, fmt.Errorf("rmq: send 1..=%d messages at once (got %d)", MaxSendBatch, len(messages))
	}
	lines := make([]map[string]any, len(messages))
	for i, m := range messages {
		lines[i] = m.body()
	}
	var out struct {
		Results []Sent `json:"results"`
	}
	err := t.client.Do(ctx, http.MethodPost, t.path+"/messages", nil, map[string]any{"messages": lines}, &out)
	return out.Results, err
}

// KeyOption sets an option of a call by key.
type KeyOption func(url.Values)

// BySlotBasis finds the key in the slot of basis b (as sent with SlotBasis).
func BySlotBasis(b string) KeyOption { return func(q url.Values) { q.Set("slot_basis", b) } }

func keyQuery(key string, opts []KeyOption) url.Values {
	q := url.Values{"key": {key}}
	for _, o := range opts {
		o(q)
	}
	return q
}

// Get is the message of key as it is now (State "absent" when there is none).
func (t *Topic) Get(ctx context.Context, key string, opts ...KeyOption) (MessageInfo, error) {
	var out MessageInfo
	err := t.client.Do(ctx, http.MethodGet, t.path+"/key", keyQuery(key, opts), nil, &out)
	return out, err
}

// Cancel cancels the message of key (pending, or in flight).
func (t *Topic) Cancel(ctx context.Context, key string, opts ...KeyOption) (Cancelled, error) {
	var out Cancelled
	err := t.client.Do(ctx, http.MethodDelete, t.path+"/key", keyQuery(key, opts), nil, &out)
	return out, err
}

// CancelMany cancels up to 10,000 keys in one request, one result each.
func (t *Topic) CancelMany(ctx context.Context, keys []string, opts ...KeyOption) ([]Cancelled, error) {
	body := map[string]any{"keys": keys}
	q := url.Values{}
	for _, o := range opts {
		o(q)
	}
	if b := q.Get("slot_basis"); b != "" {
		body["slot_basis"] = b
	}
	var out struct {
		Results []Cancelled `json:"results"`
	}
	err := t.client.Do(ctx, http.MethodPost, t.path+"/cancel", nil, body, &out)
	return out.Results, err
}

// Schedule is where Reschedule moves a message: a due time (At or Delay)
// or a Priority.
type Schedule struct {
	At        time.Time
	Delay     time.Duration
	Priority  *uint32
	SlotBasis string
}

// Reschedule moves the pending message of key.
func (t *Topic) Reschedule(ctx context.Context, key string, to Schedule) (Rescheduled, error) {
	body := map[string]any{}
	if !to.At.IsZero() {
		body["at"] = to.At.UnixMilli()
	}
	if to.Delay > 0 {
		body["delay"] = to.Delay.Milliseconds()
	}
	if to.Priority != nil {
		body["priority"] = *to.Priority
	}
	if to.SlotBasis != "" {
		body["slot_basis"] = to.SlotBasis
	}
	var out Rescheduled
	err := t.client.Do(ctx, http.MethodPost, t.path+"/key/reschedule", url.Values{"key": {key}}, body, &out)
	return out, err
}

// TakeOptions are a take's options.
type TakeOptions struct {
	// Wait is how long to wait for a first message (up to 30 s; default 0).
	Wait time.Duration
	// Lease is each delivery's lease (default: the topic's).
	Lease time.Duration
	// Group and Member: serial mode.
	Group, Member string
	// MemberTimeout: serial mode; a member silent this long is gone.
	MemberTimeout time.Duration
}

// Take takes up to max due messages, waiting up to o.Wait for a first one.
// Cancelling ctx gives the take up (the server gives back what it took for
// a client that hung up).
func (t *Topic) Take(ctx context.Context, max int, o TakeOptions) ([]Delivery, error) {
	body := map[string]any{"max": max, "wait_ms": o.Wait.Milliseconds()}
	if o.Lease > 0 {
		body["lease_ms"] = o.Lease.Milliseconds()
	}
	if o.Group != "" {
		body["group"] = o.Group
	}
	if o.Member != "" {
		body["member"] = o.Member
	}
	if o.MemberTimeout > 0 {
		body["member_timeout_ms"] = o.MemberTimeout.Milliseconds()
	}
	var out struct {
		Deliveries []Delivery `json:"deliveries"`
	}
	err := t.client.do(ctx, t.client.timeout+o.Wait, http.MethodPost, t.path+"/take", nil, body, &out)
	for i := range out.Deliveries {
		out.Deliveries[i].Topic = t.Name
	}
	return out.Deliveries, err
}

// Ack: done, the messages are removed.
func (t *Topic) Ack(ctx context.Context, receipts ...string) ([]Settlement, error) {
	return t.settle(ctx, "ack", receipts, nil)
}

// Nack: failed, retried after retryAfter (the topic's backoff when 0); dead
// after the last attempt, with reason.
func (t *Topic) Nack(ctx context.Context, reason string, retryAfter time.Duration, receipts ...string) ([]Settlement, error) {
	extra := map[string]any{}
	if reason != "" {
		extra["error"] = reason
	}
	if retryAfter > 0 {
		extra["retry_after_ms"] = retryAfter.Milliseconds()
	}
	return t.settle(ctx, "nack", receipts, extra)
}

// Dead: failed for good, straight to the dead letters with reason.
func (t *Topic) Dead(ctx context.Context, reason string, receipts ...string) ([]Settlement, error) {
	extra := map[string]any{}
	if reason != "" {
		extra["error"] = reason
	}
	return t.settle(ctx, "dead", receipts, extra)
}

// Extend: the leases now end lease from now.
func (t *Topic) Extend(ctx context.Context, lease time.Duration, receipts ...string) ([]Settlement, error) {
	return t.settle(ctx, "extend", receipts, map[string]any{"lease_ms": lease.Milliseconds()})
}

// Release: given back untouched, due again at once, no attempt counted.
func (t *Topic) Release(ctx context.Context, receipts ...string) ([]Settlement, error) {
	return t.settle(ctx, "release", receipts, nil)
}

func (t *Topic) settle(ctx context.Context, op string, receipts []string, extra map[string]any) ([]Settlement, error) {
	if len(receipts) < 1 || len(receipts) > MaxTake {
		return nil, fmt.Errorf("rmq: settle 1..=%d receipts at once (got %d)", MaxTake, len(receipts))
	}
	body := map[string]any{"receipts": receipts}
	for k, v := range extra {
		body[k] = v
	}
	var out struct {
		Results []Settlement `json:"results"`
	}
	err := t.client.Do(ctx, http.MethodPost, t.path+"/"+op, nil, body, &out)
	return out.Results, err
}
