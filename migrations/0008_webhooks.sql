-- Webhooks: the endpoints business servers registered, with each one's
-- delivery cursor and retry state, and the outbox of the rarer events
-- (recall, group, friend, block, online). Message events are read from
-- t_messages itself, so a send writes nothing here (docs/decisions.md 91).

CREATE TABLE IF NOT EXISTS t_webhook_endpoints (
    id                BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY COMMENT 'endpoint id',
    url               VARCHAR(2048) NOT NULL COMMENT 'where events are POSTed',
    events            VARCHAR(1024) NOT NULL DEFAULT '' COMMENT 'comma-separated event types it receives; empty = all',
    secret            VARCHAR(128)  NOT NULL COMMENT 'whsec_ signing secret',
    old_secret        VARCHAR(128)  NOT NULL DEFAULT '' COMMENT 'the secret before the last rotation, also signed with until old_secret_until',
    old_secret_until  DATETIME(3)   NULL COMMENT 'end of the rotation grace period',
    status            TINYINT       NOT NULL DEFAULT 1 COMMENT '1 active, 2 disabled by an operator, 3 gone (answered 410), 4 dead (retries exhausted)',
    cursor_id         BIGINT        NOT NULL DEFAULT 0 COMMENT 'every event with a smaller or equal id (t_messages.id or t_webhook_events.id) is delivered',
    attempts          INT           NOT NULL DEFAULT 0 COMMENT 'failed attempts at the event after the cursor',
    failing_since     DATETIME(3)   NULL COMMENT 'first failed attempt at the event after the cursor',
    next_attempt_at   DATETIME(3)   NULL COMMENT 'no attempt before this time',
    last_error        VARCHAR(512)  NOT NULL DEFAULT '' COMMENT 'why the last attempt failed',
    from_config       TINYINT       NOT NULL DEFAULT 0 COMMENT '1 when logic.webhook.urls created it',
    created_at        DATETIME(3)   NOT NULL COMMENT 'when the endpoint was created',
    updated_at        DATETIME(3)   NOT NULL COMMENT 'when the row last changed'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='webhook endpoints with their delivery cursor and retry state';

CREATE TABLE IF NOT EXISTS t_webhook_events (
    id               BIGINT        NOT NULL PRIMARY KEY COMMENT 'event id (sonyflake, the MsgId space): merged with t_messages ids into one order',
    event_type       VARCHAR(32)   NOT NULL COMMENT 'message.recalled, group.created, friend.added, user.online, …',
    conversation_id  BIGINT        NOT NULL DEFAULT 0 COMMENT 'conversation the event concerns, 0 if none',
    data             BLOB          NOT NULL COMMENT 'compact JSON object, the event''s data field',
    created_at       DATETIME(3)   NOT NULL COMMENT 'when the change committed'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='outbox of the webhook events that t_messages does not hold';
