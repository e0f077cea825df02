"""Producing and steering by key against a real server: each option of
each kind reaches Redis, a lookup tells the state, cancel and reschedule
act on one key, and bad input or a bad token is a typed error that
changes nothing."""

import time

import pytest
from conftest import TOKEN, fresh_topic, run

from rmq_client import BadRequest, Client, Message, NotFound, SyncClient, Unauthorized


def test_fixed_time_messages_merge_by_key_and_steer_by_key(server):
    async def go():
        async with fresh_topic(server, "fixed-time", slots=4) as (rmq, t):
            first = await t.send("unpaid", key="order-1", delay_ms=60_000)
            assert not first.merged and first.due_ms is not None
            again = await t.send("unpaid, again", key="order-1", delay_ms=120_000)
            assert again.merged, "a second send of a pending key merges"
            info = await t.get("order-1")
            assert (info.state, info.payload) == ("pending", "unpaid, again")
            assert info.due_ms == again.due_ms
            moved = await t.reschedule("order-1", delay_ms=5_000)
            assert moved.rescheduled and moved.due_ms < again.due_ms
            gone = await t.cancel("order-1")
            assert gone.cancelled
            assert not (await t.get("order-1")).exists
            assert not (await t.cancel("order-1")).cancelled, "nothing left to cancel"

    run(go())


def test_a_batch_sends_every_kind_of_option_in_one_request(server):
    async def go():
        async with fresh_topic(server, "priority", slots=2) as (rmq, t):
            sent = await t.send_batch([Message(f"m{i}", key=f"k{i}", priority=i) for i in range(100)])
            assert [s.priority for s in sent] == list(range(100))
            assert all(not s.merged for s in sent)
            info = await t.get("k7")
            assert (info.state, info.priority) == ("pending", 7)
            cancelled = await t.cancel_many(["k1", "k2", "nope"])
            assert [c.cancelled for c in cancelled] == [True, True, False]
            steered = await t.send("x", key="a", priority=1, slot_basis="entity-9")
            other = await t.send("y", key="b", priority=1, slot_basis="entity-9")
            assert steered.slot == other.slot, "one slot basis, one slot"
            assert (await t.get("a", slot_basis="entity-9")).exists

    run(go())


def test_a_batch_reports_a_message_refused_on_its_own_and_sends_the_rest(server):
    async def go():
        async with fresh_topic(server, "fixed-time", slots=1) as (rmq, t):
            past = int(time.time() * 1000) - 3_600_000
            sent = await t.send_batch([Message("ok", key="a", delay_ms=1000), Message("late", key="b", at_ms=past)])
            assert sent[0].ok and sent[0].slot == 0
            assert not sent[1].ok and sent[1].error.kind == "PastDue", sent[1]
            assert (await t.get("a")).exists and not (await t.get("b")).exists

    run(go())


def test_at_and_range_reach_redis(server):
    async def go():
        async with fresh_topic(server, "range-merge", slots=1) as (rmq, t):
            a = await t.send("v1", key="r", range_ms=60_000)
            b = await t.send("v2", key="r", range_ms=60_000)
            assert b.merged and b.due_ms == a.due_ms, "the first due time is kept"
            assert (await t.get("r")).payload == "v2", "the newest payload wins"
            await rmq.create_topic(t.name + "f", "fixed-time", slots=1)
            at = int(time.time() * 1000) + 60_000
            fixed = await rmq.topic(t.name + "f").send("v", key="f", at_ms=at)
            assert fixed.due_ms == at

    run(go())


def test_bad_input_and_a_bad_token_are_typed_errors_that_change_nothing(server):
    async def go():
        async with fresh_topic(server, "priority", slots=1) as (rmq, t):
            with pytest.raises(BadRequest) as e:
                await t.send("x", delay_ms=10)  # a priority topic has no due time
            assert e.value.status == 400 and e.value.kind
            with pytest.raises(NotFound):
                await rmq.topic("no-such-topic").send("x", priority=1)
            with pytest.raises(ValueError):
                await t.send(b"\xff\xfe", priority=1)
            stats = await rmq.request("GET", f"/topics/{t.name}/stats")
            assert stats["total"]["pending"] == 0, stats
        async with Client(server.url, "wrong-token-wrong-token") as bad:
            with pytest.raises(Unauthorized) as e:
                await bad.topic(t.name).send("x", priority=1)
            assert e.value.kind == "Unauthorized"
            with pytest.raises(Unauthorized):
                await bad.topic(t.name).take(1)

    run(go())


def test_the_blocking_client_has_the_same_surface(server, topic_name):
    with SyncClient(server.url, TOKEN) as rmq:
        rmq.create_topic(topic_name, "priority", slots=1)
        t = rmq.topic(topic_name)
        assert not t.send("hello", key="k", priority=3).merged
        [d] = t.take(1)
        assert (d.key, d.payload, d.attempt, d.priority) == ("k", "hello", 1, 3)
        assert [s.outcome for s in t.ack([d])] == ["acked"]
        with pytest.raises(BadRequest):
            t.take(0)
