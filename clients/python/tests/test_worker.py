"""The worker against a real server: every message handled once at
concurrency 16, retries and dead letters by what the handler does, a
handler past its timeout retried, a long handler kept by its lease, a
stop that gives back what did not finish, serial mode one message of an
entity at a time and in order across two workers, and a server restart
in the middle of a run with nothing lost."""

import asyncio
import collections
import time

from conftest import fresh_topic, run

from rmq_client import Dead, DeadLetter, Message, Retry


async def stats(rmq, topic):
    return (await rmq.request("GET", f"/topics/{topic}/stats"))["total"]


async def fill(t, n, **opts):
    for start in range(0, n, 1000):
        await t.send_batch([Message(f"m{i}", key=f"k{i}", **opts) for i in range(start, min(n, start + 1000))])


def test_five_thousand_messages_at_concurrency_16_are_each_handled_once(server):
    async def go():
        async with fresh_topic(server, "priority", slots=16) as (rmq, t):
            await fill(t, 5000, priority=1)
            seen = collections.Counter()
            running, peak = 0, 0

            async def handle(d):
                nonlocal running, peak
                running += 1
                peak = max(peak, running)
                await asyncio.sleep(0.001)
                running -= 1
                seen[d.key] += 1
                if len(seen) == 5000:
                    worker.stop()

            worker = t.worker(handle, concurrency=16, wait_ms=1000)
            report = await asyncio.wait_for(worker.run(), 120)
            assert report.acked == 5000, report
            assert set(seen) == {f"k{i}" for i in range(5000)}
            assert max(seen.values()) == 1, "each message handled once"
            assert 1 < peak <= 16, peak
            s = await stats(rmq, t.name)
            assert (s["pending"], s["in_flight"]) == (0, 0), s

    run(go())


def test_failures_retry_and_dead_letter_by_what_the_handler_does(server):
    async def go():
        async with fresh_topic(server, "priority", slots=2, max_attempts=3, backoff_ms=10, backoff_max_ms=20) as (rmq, t):
            for key in ("flaky", "poison", "returned-dead", "always-fails", "later"):
                await t.send(key, key=key, priority=1)
            attempts = collections.Counter()
            ended = set()

            async def handle(d):
                attempts[d.key] += 1
                if d.key == "flaky" and d.attempt < 2:
                    raise RuntimeError("not yet")
                if d.key == "poison":
                    raise DeadLetter("cannot parse")
                if d.key == "returned-dead":
                    return Dead("refused")
                if d.key == "always-fails":
                    raise ValueError(f"attempt {d.attempt} failed")
                if d.key == "later" and d.attempt == 1:
                    return Retry("come back", after_ms=10)
                ended.add(d.key)

            worker = t.worker(handle, concurrency=4, wait_ms=200)

            async def stop_when_done():
                while not ({"flaky", "later"} <= ended and attempts["always-fails"] == 3):
                    await asyncio.sleep(0.02)
                await asyncio.sleep(0.2)
                worker.stop()

            stopper = asyncio.ensure_future(stop_when_done())
            report = await asyncio.wait_for(worker.run(), 30)
            await stopper
            assert (attempts["flaky"], attempts["later"], attempts["poison"]) == (2, 2, 1)
            assert attempts["always-fails"] == 3, "retried up to the topic's last attempt"
            assert (report.acked, report.dead) == (2, 3), report
            letters = (await rmq.request("GET", f"/topics/{t.name}/dead"))["dead"]
            errors = {letter["key"]: letter["error"] for letter in letters}
            assert errors["poison"] == "cannot parse"
            assert errors["returned-dead"] == "refused"
            assert errors["always-fails"] == "ValueError: attempt 3 failed", errors

    run(go())


def test_a_handler_past_its_timeout_is_cancelled_and_retried(server):
    async def go():
        async with fresh_topic(server, "priority", slots=1, backoff_ms=60_000) as (rmq, t):
            await t.send("slow", key="slow", priority=1)
            cancelled = asyncio.Event()

            async def handle(d):
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    cancelled.set()
                    raise

            worker = t.worker(handle, concurrency=1, handler_timeout=0.3, wait_ms=200)
            run_ = asyncio.ensure_future(worker.run())
            await asyncio.wait_for(cancelled.wait(), 10)
            await asyncio.sleep(0.3)
            worker.stop()
            report = await asyncio.wait_for(run_, 10)
            assert report.retried == 1, report
            info = await t.get("slow")
            assert info.state == "retry-waiting", info
            assert info.error == "handler timed out after 0.3s", info

    run(go())


def test_a_long_handler_keeps_its_delivery_by_extending_the_lease(server):
    async def go():
        async with fresh_topic(server, "priority", slots=1) as (rmq, t):
            await t.send("long", key="long", priority=1)
            handled = []

            async def handle(d):
                handled.append(d.attempt)
                await asyncio.sleep(2.0)  # over three leases of 600 ms
                worker.stop()

            worker = t.worker(handle, concurrency=2, lease_ms=600, wait_ms=200)
            report = await asyncio.wait_for(worker.run(), 20)
            assert handled == [1], "never taken again while held"
            assert report.acked == 1, report

    run(go())


def test_stop_waits_for_running_handlers_and_gives_back_the_rest_untouched(server):
    async def go():
        async with fresh_topic(server, "priority", slots=4) as (rmq, t):
            await fill(t, 6, priority=1)
            started = []

            async def handle(d):
                started.append(d.key)
                if len(started) == 1:
                    await asyncio.sleep(0.3)  # finishes within the grace
                    return
                await asyncio.sleep(60)  # does not

            worker = t.worker(handle, concurrency=3, shutdown_grace=1.0, wait_ms=200)
            run_ = asyncio.ensure_future(worker.run())
            while len(started) < 3:
                await asyncio.sleep(0.01)
            worker.stop()
            t0 = time.monotonic()
            report = await asyncio.wait_for(run_, 10)
            assert time.monotonic() - t0 < 3, "the grace bounds the stop"
            assert (report.acked, report.released) == (1, 2), report
            s = await stats(rmq, t.name)
            assert (s["pending"], s["in_flight"], s["retry_waiting"]) == (5, 0, 0), s
            again = await t.take(5)
            assert [d.attempt for d in again] == [1] * 5, "a release counts no attempt"

    run(go())


def test_serial_mode_handles_one_message_of_an_entity_at_a_time_in_order(server):
    async def go():
        async with fresh_topic(server, "fixed-time", slots=8, past_tolerance_ms=600_000) as (rmq, t):
            entities, per = 6, 25
            base = int(time.time() * 1000) - 60_000
            batch = [
                Message(f"{e}:{i}", key=f"e{e}-{i}", at_ms=base + i, slot_basis=f"entity-{e}")
                for i in range(per)
                for e in range(entities)
            ]
            assert all(s.ok for s in await t.send_batch(batch))
            log = []  # (entity, seq, start, end, worker)
            done = asyncio.Event()

            def handler(name):
                async def handle(d):
                    e, i = map(int, d.payload.split(":"))
                    start = time.monotonic()
                    await asyncio.sleep(0.002)
                    log.append((e, i, start, time.monotonic(), name))
                    if len(log) == entities * per:
                        done.set()

                return handle

            workers = [
                t.worker(handler(n), concurrency=8, group="g", member=f"w{n}", wait_ms=200, member_timeout_ms=2000)
                for n in (1, 2)
            ]
            runs = [asyncio.ensure_future(w.run()) for w in workers]
            await asyncio.wait_for(done.wait(), 60)
            for w in workers:
                w.stop()
            reports = await asyncio.gather(*runs)
            assert sum(r.acked for r in reports) == entities * per, reports
            for e in range(entities):
                mine = sorted((x for x in log if x[0] == e), key=lambda x: x[2])
                assert [x[1] for x in mine] == list(range(per)), f"entity {e} out of order"
                for a, b in zip(mine, mine[1:]):
                    assert a[3] <= b[2], f"entity {e}: {a} overlaps {b}"
            assert {x[4] for x in log} == {1, 2}, "both members worked"

    run(go())


def test_a_server_restart_in_the_middle_of_a_run_loses_nothing(server):
    async def go():
        async with fresh_topic(server, "priority", slots=8, lease_ms=3000, client_timeout=5) as (rmq, t):
            n = 2000
            await fill(t, n, priority=1)
            seen = collections.Counter()
            restarted = asyncio.Event()

            async def handle(d):
                await asyncio.sleep(0.001)
                seen[d.key] += 1

            worker = t.worker(handle, concurrency=16, wait_ms=500)
            run_ = asyncio.ensure_future(worker.run())
            while len(seen) < n // 3:
                await asyncio.sleep(0.01)
            await asyncio.get_running_loop().run_in_executor(None, server.restart)
            restarted.set()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                s = await stats(rmq, t.name)
                if len(seen) == n and s["pending"] == 0 and s["in_flight"] == 0:
                    break
                await asyncio.sleep(0.1)
            worker.stop()
            await asyncio.wait_for(run_, 30)
            assert set(seen) == {f"k{i}" for i in range(n)}, f"{n - len(seen)} never handled"
            s = await stats(rmq, t.name)
            assert (s["pending"], s["in_flight"], s["dead"]) == (0, 0, 0), s
            # A delivery whose ack was cut by the restart comes back after its
            # lease: handled again, never lost.
            assert sum(seen.values()) - n <= 16 * 2, seen.most_common(3)

    run(go())
