// Command unpaid_orders closes unpaid orders after 30 minutes and cancels
// the timer when an order is paid.
//
// Each order placed sends a fixed-time message keyed by the order id, due
// in 30 minutes; paying the order cancels that key. A worker closes the
// orders whose message comes due. Against a running rmq serve:
//
//	RMQ_URL=http://127.0.0.1:8080 RMQ_TOKEN=$(cat token) go run ./unpaid_orders   # in examples/go
//
// UNPAID_AFTER_MS shortens the 30 minutes for a try; STOP_AFTER=N stops the
// worker after N closed orders (else it runs until Ctrl-C).
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	rmq "rmq/clients/go"
)

func main() {
	unpaidAfter := 30 * time.Minute
	if ms, err := strconv.Atoi(os.Getenv("UNPAID_AFTER_MS")); err == nil {
		unpaidAfter = time.Duration(ms) * time.Millisecond
	}
	stopAfter, _ := strconv.Atoi(os.Getenv("STOP_AFTER"))
	url := os.Getenv("RMQ_URL")
	if url == "" {
		url = "http://127.0.0.1:8080"
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := rmq.New(url, rmq.WithToken(os.Getenv("RMQ_TOKEN")))
	// Creating a topic that exists with the same definition is a no-op.
	if _, err := c.CreateTopic(ctx, "unpaid-orders", "fixed-time", map[string]any{"slots": 16}); err != nil {
		log.Fatal(err)
	}
	timers := c.Topic("unpaid-orders")

	// Three orders are placed: each is closed in 30 minutes unless paid.
	for _, order := range []string{"order-1", "order-2", "order-3"} {
		if _, err := timers.Send(ctx, order, rmq.Key(order), rmq.Delay(unpaidAfter)); err != nil {
			log.Fatal(err)
		}
	}
	// order-1 is paid: its timer goes.
	if _, err := timers.Cancel(ctx, "order-1"); err != nil {
		log.Fatal(err)
	}

	var closed int64
	worker := timers.Worker(func(_ context.Context, d rmq.Delivery) error {
		fmt.Printf("closing unpaid %s (attempt %d)\n", d.Key, d.Attempt)
		if atomic.AddInt64(&closed, 1) == int64(stopAfter) {
			stop()
		}
		return nil // nil acks it; an error retries it later
	}, rmq.WorkerOptions{Concurrency: 8})
	report, err := worker.Run(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("closed %d orders\n", report.Acked)
}
