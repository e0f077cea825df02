#!/usr/bin/env python3
"""An rmq worker: `rmq consume TOPIC --worker 'python3 examples/worker.py' --workers 4`.

Reads one JSON line per delivery on stdin, answers one JSON line per result on
stdout (ack, retry or dead). Logs go to stderr: stdout is the protocol.
"""
import base64, json, sys

def handle(payload: bytes, msg: dict) -> None:
    print(f"handling {msg.get('key')!r} attempt {msg['attempt']}", file=sys.stderr)
    if payload == b"poison":
        raise ValueError("cannot handle this payload")

for line in sys.stdin:
    msg = json.loads(line)
    payload = (base64.b64decode(msg["payload_base64"]) if "payload_base64" in msg
               else msg["payload"].encode())
    try:
        handle(payload, msg)
        result = {"id": msg["id"], "outcome": "ack"}
    except ValueError as e:
        result = {"id": msg["id"], "outcome": "dead", "error": str(e)}
    except Exception as e:  # anything else: try again in 5 s
        result = {"id": msg["id"], "outcome": "retry", "error": repr(e), "retry_after_ms": 5000}
    print(json.dumps(result), flush=True)
