-- Sync, read/recall/delete and the mailbox: pinned conversations,
-- per-user message deletions and the per-user mailbox sequence. Every
-- query on these tables is keyed by user_id.

ALTER TABLE t_conversation_members
    ADD COLUMN pinned TINYINT NOT NULL DEFAULT 0 COMMENT '1 when the member pinned this conversation to the top of the list' AFTER muted;

CREATE TABLE IF NOT EXISTS t_message_deletions (
    user_id          BIGINT      NOT NULL COMMENT 'user who deleted the message for themselves',
    msg_id           BIGINT      NOT NULL COMMENT 'the deleted message (t_messages.id)',
    conversation_id  BIGINT      NOT NULL COMMENT 'conversation of the message, so one user''s deletions in a conversation are a range scan',
    created_at       DATETIME(3) NOT NULL COMMENT 'when the user deleted it',
    PRIMARY KEY (user_id, msg_id),
    KEY idx_user_conversation (user_id, conversation_id, msg_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='delete-for-me: messages hidden from one user on every device of theirs';

CREATE TABLE IF NOT EXISTS t_mailbox_seqs (
    user_id     BIGINT      NOT NULL PRIMARY KEY COMMENT 'owner of the mailbox',
    last_seq    BIGINT      NOT NULL DEFAULT 0 COMMENT 'newest seq assigned; new seqs are assigned above it under this row lock, so they commit in order',
    updated_at  DATETIME(3) NOT NULL COMMENT 'when the last seq was assigned'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='per-user mailbox sequence counter';
