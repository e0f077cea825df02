package rmq

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Limits of the server's API.
const (
	// MaxSendBatch is how many messages one batch send takes at most.
	MaxSendBatch = 10_000
	// MaxTake is how many deliveries one take answers at most, and how many
	// receipts one settle takes at most.
	MaxTake = 1_000
	// MaxWait is the longest a take waits for a first message.
	MaxWait = 30 * time.Second
)

// Client is a connection to rmq serve. It is safe for concurrent use.
type Client struct {
	base    string
	token   string
	http    *http.Client
	timeout time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithToken sets the bearer token that actions need.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient uses another http.Client (its Timeout should be zero: each
// request gets its own deadline).
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithTimeout sets how long one request may take (a take adds its wait);
// default 10 s.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// New is a client of the server at baseURL (e.g. http://127.0.0.1:8080).
func New(baseURL string, opts ...Option) *Client {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 64
	c := &Client{
		base:    strings.TrimRight(baseURL, "/") + "/api/v1",
		http:    &http.Client{Transport: transport},
		timeout: 10 * time.Second,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Topic is a handle on topic name (nothing is asked of the server yet).
func (c *Client) Topic(name string) *Topic {
	return &Topic{client: c, Name: name, path: "/topics/" + url.PathEscape(name)}
}

// Topics lists every topic with its definition and counts.
func (c *Client) Topics(ctx context.Context) ([]map[string]any, error) {
	var out struct {
		Topics []map[string]any `json:"topics"`
	}
	err := c.Do(ctx, http.MethodGet, "/topics", nil, nil, &out)
	return out.Topics, err
}

// CreateTopic creates topic name of kind ("priority", "fixed-time" or
// "range-merge") with any settings that differ from the defaults ("slots",
// "lease_ms", "max_attempts", "backoff_ms", ...). Alike to an existing
// topic, it changes nothing.
func (c *Client) CreateTopic(ctx context.Context, name, kind string, settings map[string]any) (map[string]any, error) {
	body := map[string]any{"name": name, "kind": kind}
	for k, v := range settings {
		body[k] = v
	}
	var out map[string]any
	err := c.Do(ctx, http.MethodPost, "/topics", nil, body, &out)
	return out, err
}

// Do makes one API call (path below /api/v1) and decodes its JSON answer
// into out; an error status is an *Error.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	return c.do(ctx, c.timeout, method, path, query, body, out)
}

func (c *Client) do(ctx context.Context, timeout time.Duration, method, path string, query url.Values, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var reader io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("rmq: encoding the request: %w", err)
		}
		reader = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, reader)
	if err != nil {
		return fmt.Errorf("rmq: %w", err)
	}
	req.Header.Set("content-type", "application/json")
	if c.token != "" {
		req.Header.Set("authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return &Error{Kind: "ConnectionFailed", Message: fmt.Sprintf("%s %s: %v", method, path, err), Err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return &Error{Kind: "ConnectionFailed", Message: fmt.Sprintf("%s %s: %v", method, path, err), Err: err}
	}
	if resp.StatusCode >= 400 {
		return errorOf(resp.StatusCode, raw)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return &Error{Status: resp.StatusCode, Kind: "Error", Message: fmt.Sprintf("%s %s: the answer is not the JSON expected: %v", method, path, err)}
	}
	return nil
}

// errorOf is the *Error an answer with this status and body stands for.
func errorOf(status int, raw []byte) *Error {
	var body struct {
		Error *struct {
			Kind    string `json:"kind"`
			Message string `json:"message"`
		} `json:"error"`
	}
	e := &Error{Status: status, Kind: "Error", Message: fmt.Sprintf("HTTP %d", status)}
	if json.Unmarshal(raw, &body) == nil && body.Error != nil {
		e.Kind, e.Message = body.Error.Kind, body.Error.Message
	}
	return e
}
