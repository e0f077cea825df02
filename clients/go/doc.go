// Package rmq is the Go client of rmq serve's HTTP API: send, look up,
// cancel and reschedule messages; take and settle them by receipt; and a
// Worker that runs a handler per message with a concurrency, retries, dead
// letters, lease extension, a handler timeout and a graceful stop.
//
// It uses the standard library only (net/http, encoding/json), and every
// call takes a context.Context.
//
//	c := rmq.New("http://127.0.0.1:8080", rmq.WithToken(token))
//	orders := c.Topic("unpaid-orders")
//	_, err := orders.Send(ctx, "order-42", rmq.Key("order-42"), rmq.Delay(30*time.Minute))
//	report, err := orders.Worker(closeUnpaid, rmq.WorkerOptions{Concurrency: 16}).Run(ctx)
package rmq
