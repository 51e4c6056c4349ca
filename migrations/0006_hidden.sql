-- Hidden conversations: a member may remove a conversation from their list
-- until its next message. Kept in MySQL so it survives a Redis flush.

ALTER TABLE t_conversation_members
    ADD COLUMN hidden_at_msg_id BIGINT NOT NULL DEFAULT 0 COMMENT 'last_msg_id of the conversation when the member hid it (0 = not hidden); hidden while no newer message exists' AFTER pinned;
