package rmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// settler sends the ends of many handlers together: what queued up while a
// request was out goes in the next, one request per kind of end (same
// operation, reason and delay). A request that fails for want of the
// server is tried again for retryFor (a receipt settled before a lost
// answer says "stale" the second time, and nothing changes).
type settler struct {
	topic    *Topic
	retryFor time.Duration
	reqs     chan settleReq
}

type settleReq struct {
	e       ending
	receipt string
	reply   chan Settlement
}

func newSettler(t *Topic, retryFor time.Duration) *settler {
	return &settler{topic: t, retryFor: retryFor, reqs: make(chan settleReq, 1024)}
}

func (s *settler) settle(e ending, receipt string) Settlement {
	reply := make(chan Settlement, 1)
	s.reqs <- settleReq{e: e, receipt: receipt, reply: reply}
	return <-reply
}

// close ends run once what was queued is sent (no settle may come after).
func (s *settler) close() { close(s.reqs) }

func (s *settler) run() {
	for first := range s.reqs {
		batch := []settleReq{first}
	drain:
		for len(batch) < 4*MaxTake {
			select {
			case r, ok := <-s.reqs:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		groups := map[ending][]settleReq{}
		var order []ending
		for _, r := range batch {
			if _, seen := groups[r.e]; !seen {
				order = append(order, r.e)
			}
			groups[r.e] = append(groups[r.e], r)
		}
		var wg sync.WaitGroup
		for _, e := range order {
			g := groups[e]
			for i := 0; i < len(g); i += MaxTake {
				j := i + MaxTake
				if j > len(g) {
					j = len(g)
				}
				wg.Add(1)
				go func(e ending, items []settleReq) {
					defer wg.Done()
					s.send(e, items)
				}(e, g[i:j])
			}
		}
		wg.Wait()
	}
}

func (s *settler) send(e ending, items []settleReq) {
	deadline := time.Now().Add(s.retryFor)
	pause := 50 * time.Millisecond
	pending := items
	for len(pending) > 0 {
		receipts := make([]string, len(pending))
		for i, r := range pending {
			receipts[i] = r.receipt
		}
		answers, err := s.call(e, receipts)
		if err == nil && len(answers) != len(pending) {
			err = errors.New("rmq: the server answered a settle with the wrong number of results")
		}
		if err != nil {
			if fatal(err) || time.Now().After(deadline) {
				for _, r := range pending {
					r.reply <- Settlement{Outcome: "unknown", Error: err.Error()}
				}
				return
			}
			time.Sleep(pause)
			if pause *= 2; pause > 2*time.Second {
				pause = 2 * time.Second
			}
			continue
		}
		var again []settleReq
		for i, r := range pending {
			if answers[i].Outcome == "unknown" && time.Now().Before(deadline) {
				again = append(again, r)
			} else {
				r.reply <- answers[i]
			}
		}
		pending = again
		if len(pending) > 0 {
			time.Sleep(pause)
		}
	}
}

func (s *settler) call(e ending, receipts []string) ([]Settlement, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch e.op {
	case "ack":
		return s.topic.Ack(ctx, receipts...)
	case "nack":
		return s.topic.Nack(ctx, e.reason, e.after, receipts...)
	case "dead":
		return s.topic.Dead(ctx, e.reason, receipts...)
	case "release":
		return s.topic.Release(ctx, receipts...)
	}
	return nil, fmt.Errorf("rmq: no settle operation %q", e.op)
}
