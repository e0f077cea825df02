package rmq_test

// Real servers for the client's tests: a throwaway redis-server and an rmq
// serve (the workspace's debug build, or $RMQ_BIN) on free loopback ports,
// with temp dirs, stopped by PID. Nothing here touches a server the tests
// did not start.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	rmq "rmq/clients/go"
)

const token = "go-client-test-token"

func repo() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func rmqBin(t *testing.T) string {
	bin := os.Getenv("RMQ_BIN")
	if bin == "" {
		bin = filepath.Join(repo(), "target", "debug", "rmq")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no rmq binary at %s: build it (cargo build -p rmq-cli) or set RMQ_BIN", bin)
	}
	return bin
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitFor(t *testing.T, what string, check func() bool) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if check() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not come up within 10 s", what)
}

func kill(cmd *exec.Cmd) {
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// server is a redis-server and an rmq serve on it; restart keeps the port.
type server struct {
	t       *testing.T
	dir     string
	redis   *exec.Cmd
	rport   int
	serve   *exec.Cmd
	port    int
	tokenAt string
}

func startServer(t *testing.T) *server {
	t.Helper()
	s := &server{t: t, dir: t.TempDir()}
	s.rport = freePort(t)
	s.redis = exec.Command("redis-server", "--port", fmt.Sprint(s.rport), "--bind", "127.0.0.1",
		"--dir", s.dir, "--save", "", "--appendonly", "no")
	if err := s.redis.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "redis-server", func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.rport), time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		_, _ = c.Write([]byte("PING\r\n"))
		buf := make([]byte, 16)
		n, _ := c.Read(buf)
		return strings.HasPrefix(string(buf[:n]), "+PONG")
	})
	s.tokenAt = filepath.Join(s.dir, "token")
	if err := os.WriteFile(s.tokenAt, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.port = freePort(t)
	s.launch()
	t.Cleanup(func() {
		kill(s.serve)
		kill(s.redis)
	})
	return s
}

func (s *server) url() string { return fmt.Sprintf("http://127.0.0.1:%d", s.port) }

func (s *server) launch() {
	log, err := os.OpenFile(filepath.Join(s.dir, "serve.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	defer log.Close()
	s.serve = exec.Command(rmqBin(s.t), "serve", "--redis", fmt.Sprintf("redis://127.0.0.1:%d", s.rport),
		"--listen", fmt.Sprintf("127.0.0.1:%d", s.port), "--token-file", s.tokenAt, "--shutdown-grace", "500")
	s.serve.Stdout, s.serve.Stderr = log, log
	if err := s.serve.Start(); err != nil {
		s.t.Fatal(err)
	}
	waitFor(s.t, "rmq serve", func() bool {
		r, err := http.Get(s.url() + "/api/v1/server")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 200
	})
}

func (s *server) restart() {
	kill(s.serve)
	s.launch()
}

// newTopic is a server with a fresh topic of kind and settings, and a
// client of it.
func newTopic(t *testing.T, kind string, settings map[string]any) (*server, *rmq.Client, *rmq.Topic) {
	t.Helper()
	s := startServer(t)
	c := rmq.New(s.url(), rmq.WithToken(token))
	name := topicName()
	if _, err := c.CreateTopic(context.Background(), name, kind, settings); err != nil {
		t.Fatal(err)
	}
	return s, c, c.Topic(name)
}

// topicName is a topic name of its own for each test.
func topicName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b)
}
