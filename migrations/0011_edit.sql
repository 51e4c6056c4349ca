-- Message edit (EDIT_MESSAGE, 24): a text message's sender replaces its
-- content; the id stays, the version counts the edits and edited_at is
-- the newest one's time. Columns at the end: an instant ALTER on InnoDB
-- and an online one on TiDB, however large t_messages is.

ALTER TABLE t_messages
    ADD COLUMN version   INT         NOT NULL DEFAULT 0 COMMENT 'how many times the sender edited the content (0: never)',
    ADD COLUMN edited_at DATETIME(3) NULL COMMENT 'when the content was last edited; NULL if never';
