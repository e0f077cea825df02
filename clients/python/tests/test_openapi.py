"""The client against the server's OpenAPI document: every request the
client makes (its method, route and every body field and query parameter
it can send, with every option set) is one the document declares, and
every field the client reads from a delivery is one the document
promises. A route renamed or a field dropped on either side fails here."""

import re

import httpx
from conftest import TOKEN, run

from rmq_client import Client, Message


class Recorder(httpx.AsyncBaseTransport):
    """Answers nothing real: records each request, answers with a body
    shaped enough for the client to read."""

    def __init__(self):
        self.requests = []

    async def handle_async_request(self, request):
        import json

        body = json.loads(request.content) if request.content else None
        self.requests.append((request.method, request.url.path, dict(request.url.params), body))
        path = request.url.path
        if path.endswith("/take"):
            answer = {"deliveries": []}
        elif path.endswith(("/ack", "/nack", "/dead", "/extend", "/release", "/cancel")):
            n = len((body or {}).get("receipts") or (body or {}).get("keys") or [])
            answer = {"results": [{"outcome": "acked", "cancelled": True, "state": "pending"}] * n}
        elif path.endswith("/messages") and body and "messages" in body:
            answer = {"results": [{"slot": 0}] * len(body["messages"])}
        elif path.endswith("/topics") and request.method == "GET":
            answer = {"topics": []}
        else:
            answer = {"slot": 0, "state": "absent", "key": "k"}
        return httpx.Response(200, json=answer)


async def every_call(rmq):
    """Each method of the client, with every option it has set."""
    t = rmq.topic("p")
    await rmq.topics()
    await rmq.create_topic("p", "priority", slots=4)
    await t.send("v", key="k", priority=1, slot_basis="b")
    await t.send("v", key="k", at_ms=1, range_ms=2, delay_ms=3)
    await t.send_batch([Message("v", key="k", priority=1, at_ms=1, delay_ms=2, range_ms=3, slot_basis="b")])
    await t.get("k", slot_basis="b")
    await t.cancel("k", slot_basis="b")
    await t.cancel_many(["k"], slot_basis="b")
    await t.reschedule("k", at_ms=1, delay_ms=2, priority=3, slot_basis="b")
    await t.take(5, wait_ms=10, lease_ms=100, group="g", member="m", member_timeout_ms=5000)
    await t.ack(["r"])
    await t.nack(["r"], error="e", retry_after_ms=5)
    await t.dead(["r"], error="e")
    await t.extend(["r"], lease_ms=100)
    await t.release(["r"])


def operation(doc, method, path):
    """The document's operation for a concrete path, if any."""
    for template, ops in doc["paths"].items():
        pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
        if re.match(pattern, path) and method.lower() in ops:
            return ops[method.lower()]
    return None


def schema_fields(doc, schema, seen=()):
    """Every property a request body schema allows (through refs and
    oneOf/allOf), and the required ones."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return schema_fields(doc, doc["components"]["schemas"][name], seen)
    props, required = dict(schema.get("properties", {})), set(schema.get("required", []))
    for part in schema.get("allOf", []):
        p, r = schema_fields(doc, part, seen)
        props.update(p)
        required |= r
    for part in schema.get("oneOf", []) + schema.get("anyOf", []):
        p, _ = schema_fields(doc, part, seen)
        props.update(p)
    return props, required


def test_every_request_the_client_makes_is_one_the_document_declares(server):
    doc = httpx.get(f"{server.url}/api/v1/openapi.json").json()
    recorder = Recorder()

    async def go():
        async with Client("http://rmq.test", TOKEN, transport=recorder) as rmq:
            await every_call(rmq)

    run(go())
    assert len(recorder.requests) == 15
    for method, path, params, body in recorder.requests:
        op = operation(doc, method, path)
        assert op is not None, f"{method} {path}: no such operation in the document"
        declared = {p["name"] for p in op.get("parameters", []) if p.get("in") == "query"}
        assert set(params) <= declared, f"{method} {path}: query {set(params) - declared} undeclared"
        if body is None:
            continue
        schema = op["requestBody"]["content"]["application/json"]["schema"]
        props, required = schema_fields(doc, schema)
        bodies = body["messages"] if "messages" in body and "messages" in props else [body]
        if bodies is not body and "messages" in props:
            line = props["messages"]["items"]
            props, required = schema_fields(doc, line)
        for b in bodies:
            assert set(b) <= set(props), f"{method} {path}: fields {set(b) - set(props)} undeclared"
            assert required <= set(b), f"{method} {path}: required {required - set(b)} missing"


def test_every_delivery_field_the_client_reads_is_one_the_document_promises(server):
    doc = httpx.get(f"{server.url}/api/v1/openapi.json").json()
    props, required = schema_fields(doc, doc["components"]["schemas"]["DeliveryJson"])
    read_required = {"receipt", "attempt", "slot", "taken_ms", "lease_until_ms", "message_id"}
    read_optional = {"key", "key_base64", "payload", "payload_base64", "priority", "due_ms", "fence"}
    assert read_required <= required, read_required - required
    assert read_optional <= set(props), read_optional - set(props)
    settlements = doc["components"]["schemas"]["Settlements"]
    assert "results" in settlements["required"]
