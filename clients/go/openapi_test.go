package rmq_test

// The client against the server's OpenAPI document: every request the
// client makes (its method, route and every body field and query parameter
// it can send, with every option set) is one the document declares, and
// every field the client reads from a delivery is one the document
// promises. A route renamed or a field dropped on either side fails here.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	rmq "rmq/clients/go"
)

type recorded struct {
	method, path string
	query        map[string][]string
	body         map[string]any
}

// recorder answers nothing real: it records each request and answers with
// a body shaped enough for the client to read.
type recorder struct{ requests []recorded }

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var body map[string]any
	if req.Body != nil {
		b, _ := io.ReadAll(req.Body)
		if len(b) > 0 {
			_ = json.Unmarshal(b, &body)
		}
	}
	r.requests = append(r.requests, recorded{req.Method, req.URL.Path, req.URL.Query(), body})
	var answer any
	p := req.URL.Path
	switch {
	case strings.HasSuffix(p, "/take"):
		answer = map[string]any{"deliveries": []any{}}
	case regexp.MustCompile(`/(ack|nack|dead|extend|release|cancel)$`).MatchString(p):
		n := 0
		if rs, ok := body["receipts"].([]any); ok {
			n = len(rs)
		} else if ks, ok := body["keys"].([]any); ok {
			n = len(ks)
		}
		results := make([]any, n)
		for i := range results {
			results[i] = map[string]any{"outcome": "acked", "cancelled": true}
		}
		answer = map[string]any{"results": results}
	case strings.HasSuffix(p, "/messages") && body["messages"] != nil:
		answer = map[string]any{"results": []any{map[string]any{"slot": 0}}}
	case strings.HasSuffix(p, "/topics") && req.Method == "GET":
		answer = map[string]any{"topics": []any{}}
	default:
		answer = map[string]any{"slot": 0, "state": "absent", "key": "k"}
	}
	b, _ := json.Marshal(answer)
	return &http.Response{StatusCode: 200, Body: io.NopCloser(bytes.NewReader(b)), Header: http.Header{}, Request: req}, nil
}

func everyCall(c *rmq.Client) {
	ctx := context.Background()
	t := c.Topic("p")
	p := uint32(3)
	_, _ = c.Topics(ctx)
	_, _ = c.CreateTopic(ctx, "p", "priority", map[string]any{"slots": 4})
	_, _ = t.Send(ctx, "v", rmq.Key("k"), rmq.Priority(1), rmq.SlotBasis("b"))
	_, _ = t.Send(ctx, "v", rmq.Key("k"), rmq.At(time.Unix(1, 0)), rmq.Range(time.Second), rmq.Delay(time.Second))
	_, _ = t.SendBatch(ctx, []rmq.Message{rmq.NewMessage("v", rmq.Key("k"), rmq.Priority(1), rmq.At(time.Unix(1, 0)),
		rmq.Delay(time.Second), rmq.Range(time.Second), rmq.SlotBasis("b"))})
	_, _ = t.Get(ctx, "k", rmq.BySlotBasis("b"))
	_, _ = t.Cancel(ctx, "k", rmq.BySlotBasis("b"))
	_, _ = t.CancelMany(ctx, []string{"k"}, rmq.BySlotBasis("b"))
	_, _ = t.Reschedule(ctx, "k", rmq.Schedule{At: time.Unix(1, 0), Delay: time.Second, Priority: &p, SlotBasis: "b"})
	_, _ = t.Take(ctx, 5, rmq.TakeOptions{Wait: 10 * time.Millisecond, Lease: time.Second, Group: "g", Member: "m", MemberTimeout: 5 * time.Second})
	_, _ = t.Ack(ctx, "r")
	_, _ = t.Nack(ctx, "e", 5*time.Millisecond, "r")
	_, _ = t.Dead(ctx, "e", "r")
	_, _ = t.Extend(ctx, time.Second, "r")
	_, _ = t.Release(ctx, "r")
}

type doc struct {
	Paths      map[string]map[string]operation `json:"paths"`
	Components struct {
		Schemas map[string]schema `json:"schemas"`
	} `json:"components"`
}

type operation struct {
	Parameters []struct {
		Name string `json:"name"`
		In   string `json:"in"`
	} `json:"parameters"`
	RequestBody *struct {
		Content map[string]struct {
			Schema schema `json:"schema"`
		} `json:"content"`
	} `json:"requestBody"`
}

type schema struct {
	Ref        string            `json:"$ref"`
	Properties map[string]schema `json:"properties"`
	Required   []string          `json:"required"`
	AllOf      []schema          `json:"allOf"`
	OneOf      []schema          `json:"oneOf"`
	AnyOf      []schema          `json:"anyOf"`
	Items      *schema           `json:"items"`
}

// fields: every property a schema allows (through refs, allOf, oneOf), and
// the required ones.
func (d *doc) fields(s schema) (map[string]schema, map[string]bool) {
	if s.Ref != "" {
		return d.fields(d.Components.Schemas[s.Ref[strings.LastIndex(s.Ref, "/")+1:]])
	}
	props, required := map[string]schema{}, map[string]bool{}
	for k, v := range s.Properties {
		props[k] = v
	}
	for _, r := range s.Required {
		required[r] = true
	}
	for _, part := range s.AllOf {
		p, r := d.fields(part)
		for k, v := range p {
			props[k] = v
		}
		for k := range r {
			required[k] = true
		}
	}
	for _, part := range append(s.OneOf, s.AnyOf...) {
		p, _ := d.fields(part)
		for k, v := range p {
			props[k] = v
		}
	}
	return props, required
}

func (d *doc) operation(method, path string) *operation {
	for template, ops := range d.Paths {
		pattern := "^" + regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(template, "[^/]+") + "$"
		if op, ok := ops[strings.ToLower(method)]; ok && regexp.MustCompile(pattern).MatchString(path) {
			return &op
		}
	}
	return nil
}

func fetchDoc(t *testing.T) *doc {
	s := startServer(t)
	resp, err := http.Get(s.url() + "/api/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d doc
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return &d
}

func TestEveryRequestTheClientMakesIsOneTheDocumentDeclares(t *testing.T) {
	d := fetchDoc(t)
	rec := &recorder{}
	everyCall(rmq.New("http://rmq.test", rmq.WithToken(token), rmq.WithHTTPClient(&http.Client{Transport: rec})))
	if len(rec.requests) != 15 {
		t.Fatalf("%d requests", len(rec.requests))
	}
	for _, r := range rec.requests {
		op := d.operation(r.method, r.path)
		if op == nil {
			t.Fatalf("%s %s: no such operation in the document", r.method, r.path)
		}
		declared := map[string]bool{}
		for _, p := range op.Parameters {
			if p.In == "query" {
				declared[p.Name] = true
			}
		}
		for q := range r.query {
			if !declared[q] {
				t.Fatalf("%s %s: query %s undeclared", r.method, r.path, q)
			}
		}
		if r.body == nil {
			continue
		}
		props, required := d.fields(op.RequestBody.Content["application/json"].Schema)
		bodies := []map[string]any{r.body}
		if msgs, ok := r.body["messages"].([]any); ok && props["messages"].Items != nil {
			props, required = d.fields(*props["messages"].Items)
			bodies = nil
			for _, m := range msgs {
				bodies = append(bodies, m.(map[string]any))
			}
		}
		for _, b := range bodies {
			for k := range b {
				if _, ok := props[k]; !ok {
					t.Fatalf("%s %s: field %s undeclared", r.method, r.path, k)
				}
			}
			for k := range required {
				if _, ok := b[k]; !ok {
					t.Fatalf("%s %s: required %s missing", r.method, r.path, k)
				}
			}
		}
	}
}

func TestEveryDeliveryFieldTheClientReadsIsOneTheDocumentPromises(t *testing.T) {
	d := fetchDoc(t)
	props, required := d.fields(d.Components.Schemas["DeliveryJson"])
	for _, f := range []string{"receipt", "attempt", "slot", "taken_ms", "lease_until_ms", "message_id"} {
		if !required[f] {
			t.Fatalf("%s is not required", f)
		}
	}
	for _, f := range []string{"key", "key_base64", "payload", "payload_base64", "priority", "due_ms", "fence"} {
		if _, ok := props[f]; !ok {
			t.Fatalf("%s is not a field", f)
		}
	}
}
