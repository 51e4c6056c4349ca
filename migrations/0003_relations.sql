-- Relationships: friendships, friend requests and blocks. Every table is
-- keyed by the user whose list it is (the first primary-key column), so
-- "my friends", "my blocks" and "requests to me" are single-key range
-- reads and the tables can be sharded by user id.

CREATE TABLE IF NOT EXISTS t_friends (
    user_id     BIGINT       NOT NULL COMMENT 'owner of this direction of the friendship; every friendship is two rows, one per user',
    friend_id   BIGINT       NOT NULL COMMENT 'the friend',
    remark      VARCHAR(128) NOT NULL DEFAULT '' COMMENT 'the owner''s private name for the friend, at most 128 characters',
    created_at  DATETIME(3)  NOT NULL COMMENT 'when the two users became friends',
    updated_at  DATETIME(3)  NOT NULL COMMENT 'when the row last changed (remark)',
    PRIMARY KEY (user_id, friend_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='friendships, stored as two directed rows so a user''s friend list is one key range';

CREATE TABLE IF NOT EXISTS t_friend_requests (
    to_user_id    BIGINT       NOT NULL COMMENT 'recipient of the request, whose incoming list this row is in',
    from_user_id  BIGINT       NOT NULL COMMENT 'user who asked to be friends',
    note          VARCHAR(128) NOT NULL DEFAULT '' COMMENT 'short text the requester sent with the request, at most 128 characters',
    status        TINYINT      NOT NULL COMMENT '1 pending, 2 accepted, 3 rejected; a new request after a rejection or removal sets it back to 1',
    created_at    DATETIME(3)  NOT NULL COMMENT 'when the first request of this ordered pair was made',
    updated_at    DATETIME(3)  NOT NULL COMMENT 'when the request was last made or answered',
    PRIMARY KEY (to_user_id, from_user_id),
    KEY idx_to_status (to_user_id, status, from_user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='friend requests: one row, hence at most one live request, per ordered pair of users';

CREATE TABLE IF NOT EXISTS t_blocks (
    user_id          BIGINT      NOT NULL COMMENT 'user who blocked',
    blocked_user_id  BIGINT      NOT NULL COMMENT 'user who is blocked; never told',
    created_at       DATETIME(3) NOT NULL COMMENT 'when the block was made',
    PRIMARY KEY (user_id, blocked_user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='blocks: either direction refuses P2P sends between the two users';
