"""The example in ``examples/python`` does what its docs say, against a
real server: the paid order is never closed, the two unpaid ones are."""

import os
import subprocess
import sys

from conftest import REPO, TOKEN


def test_the_unpaid_orders_example_closes_only_the_unpaid_orders(server):
    env = dict(os.environ, RMQ_URL=server.url, RMQ_TOKEN=TOKEN, UNPAID_AFTER_MS="300", STOP_AFTER="2")
    env["PYTHONPATH"] = str(REPO / "clients" / "python" / "src")
    out = subprocess.run(
        [sys.executable, str(REPO / "examples" / "python" / "unpaid_orders.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    closed = sorted(line.split()[2] for line in out.stdout.splitlines() if line.startswith("closing"))
    assert closed == ["order-2", "order-3"], out.stdout
    assert "closed 2 orders" in out.stdout
