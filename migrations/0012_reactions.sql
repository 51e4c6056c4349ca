-- Reactions (REACTION, 25): one row per user and emoji on a message, and
-- one count per emoji so that counts are read without scanning a popular
-- emoji's users (docs/decisions.md 107). Both change in the transaction
-- that locks the message row, so the per-message and per-user caps hold
-- under concurrent adds.

CREATE TABLE IF NOT EXISTS t_reactions (
    msg_id          BIGINT      NOT NULL COMMENT 'the message reacted to',
    emoji           VARCHAR(32) NOT NULL COMMENT 'one emoji, at most 32 bytes of UTF-8 (protocol.ValidEmoji)',
    user_id         BIGINT      NOT NULL COMMENT 'the member who reacted',
    conversation_id BIGINT      NOT NULL COMMENT 'the message''s conversation',
    created_at      DATETIME(3) NOT NULL COMMENT 'when the reaction was added',
    PRIMARY KEY (msg_id, emoji, user_id),
    KEY idx_msg_user (msg_id, user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='who reacted to which message with which emoji';

CREATE TABLE IF NOT EXISTS t_reaction_counts (
    msg_id   BIGINT      NOT NULL COMMENT 'the message',
    emoji    VARCHAR(32) NOT NULL COMMENT 'one emoji of it',
    n        INT         NOT NULL COMMENT 'rows of t_reactions with this msg_id and emoji; the row goes at 0',
    first_at DATETIME(3) NOT NULL COMMENT 'when the emoji was first used on the message: the order counts are shown in',
    PRIMARY KEY (msg_id, emoji)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='how many users reacted to a message with each emoji';
