-- rmq's message store, version 2: queries that stay cheap as the store
-- grows.
--
-- The relay takes each topic's due rows on its own (so that a topic whose
-- rows cannot move, a full one, never fills every batch ahead of the
-- others), and bounds load_ms by a value fixed for the statement: the
-- database's clock when the statement began. rmq_now_ms() is VOLATILE, so
-- a bound built on it is a filter checked row by row: the relay read every
-- stored row (a million far-future timers: ~18,000 buffers, ~0.3 s, every
-- round). A STABLE bound is an index condition: the scan ends at the first
-- row not yet due.
CREATE FUNCTION rmq_statement_ms() RETURNS bigint LANGUAGE sql STABLE AS
$$ SELECT (extract(epoch FROM statement_timestamp()) * 1000)::bigint $$;

CREATE INDEX rmq_messages_to_load_by_topic ON rmq_messages (topic, load_ms, id)
    WHERE status = 'stored';
DROP INDEX rmq_messages_to_load;

-- Recovery pages through a topic's queued rows in id order.
CREATE INDEX rmq_messages_queued_by_id ON rmq_messages (topic, id) WHERE status = 'queued';
