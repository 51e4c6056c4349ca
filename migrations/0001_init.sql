-- Core tables of one-to-one messaging: users, conversations, members,
-- messages and the mailbox. Every hot-path query is keyed by
-- conversation_id or user_id, so the schema can be sharded later.

CREATE TABLE IF NOT EXISTS t_users (
    id          BIGINT       NOT NULL PRIMARY KEY COMMENT 'user id, assigned by the business system',
    nickname    VARCHAR(64)  NOT NULL DEFAULT '' COMMENT 'display name',
    avatar      VARCHAR(512) NOT NULL DEFAULT '' COMMENT 'object-store key of the avatar',
    status      TINYINT      NOT NULL DEFAULT 1 COMMENT '1 active, 2 disabled',
    tokens_valid_after_ms BIGINT NOT NULL DEFAULT 0 COMMENT 'tokens issued before this Unix ms are revoked',
    created_at  DATETIME(3)  NOT NULL COMMENT 'when the row was created',
    updated_at  DATETIME(3)  NOT NULL COMMENT 'when the row last changed'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='users known to the IM server';

CREATE TABLE IF NOT EXISTS t_conversations (
    id           BIGINT      NOT NULL PRIMARY KEY COMMENT 'conversation id (sonyflake)',
    type         TINYINT     NOT NULL COMMENT '1 P2P, 2 group',
    last_msg_id  BIGINT      NOT NULL DEFAULT 0 COMMENT 'MsgId of the newest message; new MsgIds are assigned above it under this row lock',
    last_msg_at  DATETIME(3) NOT NULL COMMENT 'server time of the newest message',
    created_at   DATETIME(3) NOT NULL COMMENT 'when the conversation was created'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='one row per conversation; the row lock orders its messages';

CREATE TABLE IF NOT EXISTS t_p2p_conversations (
    id               BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY COMMENT 'surrogate key',
    user_small       BIGINT      NOT NULL COMMENT 'the smaller user id of the pair',
    user_big         BIGINT      NOT NULL COMMENT 'the bigger user id of the pair',
    conversation_id  BIGINT      NOT NULL COMMENT 'the one conversation of this pair',
    created_at       DATETIME(3) NOT NULL COMMENT 'when the pair first talked',
    UNIQUE KEY uk_p2p_users (user_small, user_big),
    UNIQUE KEY uk_conversation (conversation_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='maps a pair of users to their single P2P conversation';

CREATE TABLE IF NOT EXISTS t_conversation_members (
    id                BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY COMMENT 'surrogate key',
    conversation_id   BIGINT      NOT NULL COMMENT 'the conversation',
    user_id           BIGINT      NOT NULL COMMENT 'the member',
    role              TINYINT     NOT NULL DEFAULT 0 COMMENT '0 member, 1 admin, 2 owner (groups)',
    last_read_msg_id  BIGINT      NOT NULL DEFAULT 0 COMMENT 'newest MsgId the member has read; the truth unread is derived from',
    muted             TINYINT     NOT NULL DEFAULT 0 COMMENT '1 when the member muted notifications of this conversation',
    mute_until        DATETIME(3) NULL COMMENT 'member may not send until then (group moderation)',
    joined_at         DATETIME(3) NOT NULL COMMENT 'when the member joined',
    UNIQUE KEY uk_conversation_members (conversation_id, user_id),
    KEY idx_user_id (user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='membership and read position of users in conversations';

CREATE TABLE IF NOT EXISTS t_messages (
    id               BIGINT      NOT NULL PRIMARY KEY COMMENT 'MsgId (sonyflake): primary key, order within the conversation, sync cursor',
    conversation_id  BIGINT      NOT NULL COMMENT 'the conversation',
    sender_id        BIGINT      NOT NULL COMMENT 'user id of the sender',
    sender_device    VARCHAR(64) NOT NULL DEFAULT '' COMMENT 'device the message was sent from',
    client_msg_id    VARCHAR(64) NOT NULL COMMENT 'client idempotency key, unique per sender and conversation',
    message_type     SMALLINT    NOT NULL COMMENT '1 text 2 image 3 voice 4 video 5 sticker 6 gif 7 file 8 location 9 system',
    content          BLOB        NOT NULL COMMENT 'compact JSON bytes of the content; media carry object-store keys only',
    status           TINYINT     NOT NULL DEFAULT 1 COMMENT '1 normal, 2 recalled, 3 hidden by moderation',
    created_at       DATETIME(3) NOT NULL COMMENT 'server time of the commit',
    UNIQUE KEY uk_sender_conv_client_msg (sender_id, conversation_id, client_msg_id),
    KEY idx_conversation_id (conversation_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='message bodies; one row per message whatever the number of recipients';

CREATE TABLE IF NOT EXISTS t_mailbox_events (
    id               BIGINT        NOT NULL PRIMARY KEY COMMENT 'event id (sonyflake)',
    user_id          BIGINT        NOT NULL COMMENT 'owner of the mailbox',
    device_id        VARCHAR(64)   NOT NULL DEFAULT '' COMMENT 'device the event is for; empty = every device of the user',
    seq              BIGINT        NOT NULL COMMENT 'per-user increasing sequence, the mailbox sync cursor',
    event_type       SMALLINT      NOT NULL COMMENT '1 recall, 2 kick, 3 membership, 4 friend, 5 missed message',
    conversation_id  BIGINT        NULL COMMENT 'conversation the event concerns, if any',
    msg_id           BIGINT        NULL COMMENT 'message the event concerns, if any',
    payload          VARBINARY(4096) NULL COMMENT 'small JSON with ids only, never message content',
    created_at       DATETIME(3)   NOT NULL COMMENT 'when the event was recorded',
    UNIQUE KEY uk_user_seq (user_id, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='what sync cannot rebuild: recall, kick, membership, friend and missed-push events';

CREATE TABLE IF NOT EXISTS t_msgid_machines (
    machine_id      INT         NOT NULL PRIMARY KEY COMMENT 'sonyflake machine id of a logic process',
    high_water_ms   BIGINT      NOT NULL COMMENT 'no id issued by this machine id is later than this Unix ms',
    updated_at      DATETIME(3) NOT NULL COMMENT 'last write'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='MsgId high-water marks, so a restart with the clock set back never reissues an id';
