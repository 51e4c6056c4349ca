-- Client-to-server upstream (UPSTREAM, 22): a device's frame for a
-- business service is one t_webhook_events row of type
-- "upstream.<service>", so the webhook dispatcher delivers it to an
-- endpoint subscribed to that type with no second delivery path; a
-- client-chosen upstream_id makes a retry find the row it queued. A
-- service that pulls instead keeps its read position in
-- t_upstream_consumers (docs/decisions.md 94).

-- The column and its keys in two statements: TiDB refuses a key on a
-- column added by the same ALTER (error 1072). The file first did both in
-- one; a database that applied that form has the same schema.
-- replaces-checksum: 26a08464f8387045af594af3650f3b7a07952826fb4d5ab910953608403d1aaf

ALTER TABLE t_webhook_events
    ADD COLUMN dedupe_key VARCHAR(160) NULL COMMENT 'upstream: service, user and upstream_id of an idempotent frame; NULL otherwise';
ALTER TABLE t_webhook_events
    ADD UNIQUE KEY uk_dedupe (dedupe_key),
    ADD KEY idx_type_id (event_type, id);

CREATE TABLE IF NOT EXISTS t_upstream_consumers (
    service        VARCHAR(32)  NOT NULL PRIMARY KEY COMMENT 'the business service (logic.upstream.services)',
    cursor_id      BIGINT       NOT NULL DEFAULT 0 COMMENT 'every item with a smaller or equal id is acknowledged',
    handed_up_to   BIGINT       NOT NULL DEFAULT 0 COMMENT 'the last item handed to a puller and not yet acknowledged',
    visible_at     DATETIME(3)  NULL COMMENT 'until then a pull starts after handed_up_to; from then on after cursor_id again',
    updated_at     DATETIME(3)  NOT NULL COMMENT 'when the row last changed'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='read position of each pulling upstream service';
