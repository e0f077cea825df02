package rmq_test

// The example in examples/go does what its comments say, against a real
// server: the paid order is never closed, the two unpaid ones are.

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

func TestTheUnpaidOrdersExampleClosesOnlyTheUnpaidOrders(t *testing.T) {
	s := startServer(t)
	cmd := exec.Command("go", "run", "./unpaid_orders")
	cmd.Dir = filepath.Join(repo(), "examples", "go")
	cmd.Env = append(os.Environ(), "RMQ_URL="+s.url(), "RMQ_TOKEN="+token, "UNPAID_AFTER_MS=300", "STOP_AFTER=2")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var closed []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "closing") {
			closed = append(closed, strings.Fields(line)[2])
		}
	}
	sort.Strings(closed)
	if strings.Join(closed, ",") != "order-2,order-3" || !strings.Contains(string(out), "closed 2 orders") {
		t.Fatalf("%s", out)
	}
}
