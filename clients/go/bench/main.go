// Command bench measures the consume rate of the Go client's worker: N
// messages sent to a fresh priority topic of 16 slots, then consumed with a
// handler that does nothing at the given concurrency; it prints one JSON
// line. Used by scripts/client-bench.sh (see BENCHMARKS.md).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"math/rand"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	rmq "rmq/clients/go"
)

func main() {
	if len(os.Args) != 5 {
		log.Fatal("usage: bench URL TOKEN MESSAGES CONCURRENCY")
	}
	n, _ := strconv.Atoi(os.Args[3])
	concurrency, _ := strconv.Atoi(os.Args[4])
	ctx := context.Background()
	c := rmq.New(os.Args[1], rmq.WithToken(os.Args[2]))
	name := fmt.Sprintf("bench-go-%08x", rand.New(rand.NewSource(time.Now().UnixNano())).Uint32())
	if _, err := c.CreateTopic(ctx, name, "priority", map[string]any{"slots": 16}); err != nil {
		log.Fatal(err)
	}
	t := c.Topic(name)
	for start := 0; start < n; start += 1000 {
		var batch []rmq.Message
		for i := start; i < n && i < start+1000; i++ {
			batch = append(batch, rmq.NewMessage("x", rmq.Key(fmt.Sprintf("k%d", i)), rmq.Priority(1)))
		}
		if _, err := t.SendBatch(ctx, batch); err != nil {
			log.Fatal(err)
		}
	}
	var done int64
	runCtx, stop := context.WithCancel(ctx)
	w := t.Worker(func(context.Context, rmq.Delivery) error {
		if atomic.AddInt64(&done, 1) == int64(n) {
			stop()
		}
		return nil
	}, rmq.WorkerOptions{Concurrency: concurrency, Wait: time.Second})
	t0 := time.Now()
	report, err := w.Run(runCtx)
	secs := time.Since(t0).Seconds()
	if err != nil || report.Acked != n {
		log.Fatalf("%v %+v", err, report)
	}
	out, _ := json.Marshal(map[string]any{"client": "go", "concurrency": concurrency, "messages": n,
		"secs": float64(int(secs*1000)) / 1000, "rate": int(float64(n) / secs)})
	fmt.Println(string(out))
}
