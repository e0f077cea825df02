-- rmq's message store, version 1: topics, messages, relays.
--
-- A message row lives through: stored (committed, not yet in Redis) ->
-- queued (the relay sent it to Redis) -> done (acked) or dead (dead-lettered,
-- or refused by Redis). At most one row per (topic, slot, merge key) is
-- 'stored': a second send of a key still in the store merges into that row
-- by the topic kind's rule (INSERT ... ON CONFLICT against the partial
-- unique index below); a send of a key already queued makes a new row,
-- which merges in Redis when the relay sends it.

-- A topic's whole definition is rmq's TopicSpec as JSON; kind and slot
-- count are columns too, since rows depend on them (they never change).
CREATE TABLE rmq_topics (
    name       text PRIMARY KEY,
    kind       text NOT NULL CHECK (kind IN ('priority', 'fixed-time', 'range-merge')),
    slots      integer NOT NULL CHECK (slots > 0),
    spec       jsonb NOT NULL,
    -- A relay found the topic missing in Redis and its recovery has not
    -- finished: the next relay's check does it.
    needs_recovery boolean NOT NULL DEFAULT false,
    defined_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE rmq_messages (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic       text NOT NULL REFERENCES rmq_topics (name),
    slot        integer NOT NULL,
    merge_key   bytea NOT NULL,
    slot_basis  bytea,
    payload     bytea NOT NULL,
    -- Priority topics: the priority.
    priority    bigint,
    -- Time kinds: when it is due (Unix ms).
    due_ms      bigint,
    -- When the relay may move it to Redis (Unix ms, compared with now +
    -- the relay's window): 0 for priority and range-merge (at once), the
    -- due time for fixed-time.
    load_ms     bigint NOT NULL,
    status      text NOT NULL DEFAULT 'stored'
                CHECK (status IN ('stored', 'queued', 'done', 'dead')),
    -- How many sends merged into this row.
    sends       integer NOT NULL DEFAULT 1,
    -- Redis's clock (TIME) just before the relay sent the row (Unix ms):
    -- an ack of a delivery taken at or after it finishes the row.
    queued_ms   bigint,
    error       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);

CREATE UNIQUE INDEX rmq_messages_stored_key ON rmq_messages (topic, slot, merge_key)
    WHERE status = 'stored';
CREATE INDEX rmq_messages_to_load ON rmq_messages (load_ms, id) WHERE status = 'stored';
CREATE INDEX rmq_messages_queued_key ON rmq_messages (topic, merge_key) WHERE status = 'queued';
CREATE INDEX rmq_messages_finished ON rmq_messages (finished_at) WHERE status IN ('done', 'dead');

-- The database's clock in Unix ms (delays and ranges count from it).
CREATE FUNCTION rmq_now_ms() RETURNS bigint LANGUAGE sql VOLATILE AS
$$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;

-- Wakes the relays when a transaction that stored messages commits
-- (PostgreSQL delivers a notification at commit, once per transaction).
CREATE FUNCTION rmq_wake_relays() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN PERFORM pg_notify('rmq_store', ''); RETURN NULL; END $$;
CREATE TRIGGER rmq_messages_wake AFTER INSERT ON rmq_messages
    FOR EACH STATEMENT EXECUTE FUNCTION rmq_wake_relays();

-- Each relay's checkpoint: what it moved last and when it was last seen.
CREATE TABLE rmq_relays (
    name     text PRIMARY KEY,
    moved    bigint NOT NULL DEFAULT 0,
    last_id  bigint,
    seen_at  timestamptz NOT NULL DEFAULT now()
);
