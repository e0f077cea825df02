package rmq

import (
	"encoding/base64"
	"encoding/json"
	"time"
)

// Message is a message to send; build one with NewMessage. Give at most one
// of At, Delay or Priority.
type Message struct {
	Payload   string
	Key       string
	Priority  *uint32
	At        time.Time
	Delay     time.Duration
	Range     time.Duration
	SlotBasis string
}

// SendOption sets one option of a Message.
type SendOption func(*Message)

// Key is the message's merge key (default: its payload).
func Key(k string) SendOption { return func(m *Message) { m.Key = k } }

// Priority orders a priority topic's messages (higher first).
func Priority(p uint32) SendOption { return func(m *Message) { m.Priority = &p } }

// At makes a fixed-time or range-merge message due at t.
func At(t time.Time) SendOption { return func(m *Message) { m.At = t } }

// Delay makes a fixed-time or range-merge message due d from now.
func Delay(d time.Duration) SendOption { return func(m *Message) { m.Delay = d } }

// Range is a range-merge message's window.
func Range(d time.Duration) SendOption { return func(m *Message) { m.Range = d } }

// SlotBasis steers the slot by b instead of the key (e.g. an entity id).
func SlotBasis(b string) SendOption { return func(m *Message) { m.SlotBasis = b } }

// NewMessage is a message with these options.
func NewMessage(payload string, opts ...SendOption) Message {
	m := Message{Payload: payload}
	for _, o := range opts {
		o(&m)
	}
	return m
}

func (m Message) body() map[string]any {
	b := map[string]any{"payload": m.Payload}
	if m.Key != "" {
		b["key"] = m.Key
	}
	if m.Priority != nil {
		b["priority"] = *m.Priority
	}
	if !m.At.IsZero() {
		b["at"] = m.At.UnixMilli()
	}
	if m.Delay > 0 {
		b["delay"] = m.Delay.Milliseconds()
	}
	if m.Range > 0 {
		b["range"] = m.Range.Milliseconds()
	}
	if m.SlotBasis != "" {
		b["slot_basis"] = m.SlotBasis
	}
	return b
}

// Sent is what a send did: Merged into a message already pending (its
// duplicate), where it went, and the order Redis now holds it in. In a
// batch, a message refused on its own (a due time in the past, a full
// topic) has Err set and nothing else.
type Sent struct {
	Slot           uint32
	Merged         bool
	BehindInFlight bool
	Priority       *uint32
	DueMs          *int64
	ServerMs       *int64
	Err            *Error
}

func (s *Sent) UnmarshalJSON(b []byte) error {
	var raw struct {
		Slot           uint32          `json:"slot"`
		Merged         bool            `json:"merged"`
		BehindInFlight bool            `json:"behind_in_flight"`
		Priority       *uint32         `json:"priority"`
		DueMs          *int64          `json:"due_ms"`
		ServerMs       *int64          `json:"server_ms"`
		Error          json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*s = Sent{Slot: raw.Slot, Merged: raw.Merged, BehindInFlight: raw.BehindInFlight, Priority: raw.Priority, DueMs: raw.DueMs, ServerMs: raw.ServerMs}
	if len(raw.Error) > 0 && string(raw.Error) != "null" {
		s.Err = errorOf(400, b)
	}
	return nil
}

// keyed reads a field sent as text when UTF-8, else as <name>_base64.
func keyed(text *string, b64 *string) []byte {
	if text != nil {
		return []byte(*text)
	}
	if b64 != nil {
		if b, err := base64.StdEncoding.DecodeString(*b64); err == nil {
			return b
		}
	}
	return nil
}

// MessageInfo is a message looked up by key. State is "pending",
// "in-flight", "retry-waiting", "dead" or "absent".
type MessageInfo struct {
	Key      []byte
	State    string
	Slot     uint32
	Payload  []byte
	Attempts uint32
	Priority *uint32
	DueMs    *int64
	// Error is the last attempt's error (retry-waiting and dead messages).
	Error         string
	NextAttemptMs *int64
}

// Exists is whether there is a message of that key.
func (m MessageInfo) Exists() bool { return m.State != "absent" }

func (m *MessageInfo) UnmarshalJSON(b []byte) error {
	var raw struct {
		Key           *string `json:"key"`
		KeyBase64     *string `json:"key_base64"`
		State         string  `json:"state"`
		Slot          uint32  `json:"slot"`
		Payload       *string `json:"payload"`
		PayloadBase64 *string `json:"payload_base64"`
		Attempts      uint32  `json:"attempts"`
		Priority      *uint32 `json:"priority"`
		DueMs         *int64  `json:"due_ms"`
		Error         string  `json:"error"`
		NextAttemptMs *int64  `json:"next_attempt_ms"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*m = MessageInfo{
		Key: keyed(raw.Key, raw.KeyBase64), State: raw.State, Slot: raw.Slot,
		Payload: keyed(raw.Payload, raw.PayloadBase64), Attempts: raw.Attempts, Priority: raw.Priority,
		DueMs: raw.DueMs, Error: raw.Error, NextAttemptMs: raw.NextAttemptMs,
	}
	return nil
}

// Delivery is a message taken: settle it by Receipt before LeaseUntilMs, or
// it comes back as a failed attempt. MessageID is the same for every
// delivery of one message; Fence (serial mode) only grows: pass it to
// downstream writes.
type Delivery struct {
	Topic        string
	Receipt      string
	Key          []byte
	Payload      []byte
	Attempt      uint32
	Slot         uint32
	Priority     *uint32
	DueMs        *int64
	TakenMs      int64
	LeaseUntilMs int64
	MessageID    string
	Fence        *uint64
}

func (d *Delivery) UnmarshalJSON(b []byte) error {
	var raw struct {
		Receipt       string  `json:"receipt"`
		Key           *string `json:"key"`
		KeyBase64     *string `json:"key_base64"`
		Payload       *string `json:"payload"`
		PayloadBase64 *string `json:"payload_base64"`
		Attempt       uint32  `json:"attempt"`
		Slot          uint32  `json:"slot"`
		Priority      *uint32 `json:"priority"`
		DueMs         *int64  `json:"due_ms"`
		TakenMs       int64   `json:"taken_ms"`
		LeaseUntilMs  int64   `json:"lease_until_ms"`
		MessageID     string  `json:"message_id"`
		Fence         *uint64 `json:"fence"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*d = Delivery{
		Receipt: raw.Receipt, Key: keyed(raw.Key, raw.KeyBase64), Payload: keyed(raw.Payload, raw.PayloadBase64),
		Attempt: raw.Attempt, Slot: raw.Slot, Priority: raw.Priority, DueMs: raw.DueMs, TakenMs: raw.TakenMs,
		LeaseUntilMs: raw.LeaseUntilMs, MessageID: raw.MessageID, Fence: raw.Fence,
	}
	return nil
}

// Cancelled is what a cancel did (Outcome "absent": nothing to cancel).
type Cancelled struct {
	Key       []byte
	Cancelled bool
	Outcome   string
	State     string
}

func (c *Cancelled) UnmarshalJSON(b []byte) error {
	var raw struct {
		Key       *string `json:"key"`
		KeyBase64 *string `json:"key_base64"`
		Cancelled bool    `json:"cancelled"`
		Outcome   string  `json:"outcome"`
		State     string  `json:"state"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*c = Cancelled{Key: keyed(raw.Key, raw.KeyBase64), Cancelled: raw.Cancelled, Outcome: raw.Outcome, State: raw.State}
	return nil
}

// Rescheduled is what a reschedule did.
type Rescheduled struct {
	Rescheduled bool    `json:"rescheduled"`
	DueMs       *int64  `json:"due_ms"`
	Priority    *uint32 `json:"priority"`
}

// Settlement is one receipt's answer: "acked", "retrying", "dead",
// "extended", "released", "superseded", "cancelled", "stale" (its lease ran
// out, or it was settled already: nothing changed), "fenced" (serial mode:
// the slot moved on), "invalid" or "unknown" (Redis failed; settle again).
type Settlement struct {
	Outcome string
	Error   string
}

// Done is whether the receipt was settled as asked (or the message ended
// anyway).
func (s Settlement) Done() bool {
	switch s.Outcome {
	case "stale", "fenced", "invalid", "unknown":
		return false
	}
	return true
}

func (s *Settlement) UnmarshalJSON(b []byte) error {
	var raw struct {
		Outcome string          `json:"outcome"`
		Error   json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*s = Settlement{Outcome: raw.Outcome}
	if len(raw.Error) > 0 {
		var e struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(raw.Error, &e) == nil {
			s.Error = e.Message
		} else {
			_ = json.Unmarshal(raw.Error, &s.Error)
		}
	}
	return nil
}
