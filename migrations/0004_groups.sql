-- Groups. A group is a conversation (t_conversations.type = 2) whose
-- members are t_conversation_members rows (role 0 member, 1 admin, 2 owner;
-- mute_until); this table holds what only a group has. Every membership
-- change locks the group's row here, so changes of one group serialize
-- while sends (which lock the t_conversations row) never wait for them.

CREATE TABLE IF NOT EXISTS t_groups (
    id               BIGINT        NOT NULL PRIMARY KEY COMMENT 'group id (sonyflake), the group_id clients and the API use',
    conversation_id  BIGINT        NOT NULL COMMENT 'the group''s conversation (t_conversations.id, type 2); its members are the group''s members',
    name             VARCHAR(64)   NOT NULL COMMENT 'group name shown to members',
    avatar           VARCHAR(512)  NOT NULL DEFAULT '' COMMENT 'object-store key of the group avatar',
    announcement     VARCHAR(2048) NOT NULL DEFAULT '' COMMENT 'announcement text set by the owner or an admin',
    owner_id         BIGINT        NOT NULL COMMENT 'user id of the owner (the member whose role is 2)',
    mute_all         TINYINT       NOT NULL DEFAULT 0 COMMENT '1 when only the owner and admins may send',
    status           TINYINT       NOT NULL DEFAULT 1 COMMENT '1 active, 2 dissolved (members keep reading the history, nobody can send)',
    member_count     INT           NOT NULL DEFAULT 0 COMMENT 'number of t_conversation_members rows of the conversation, kept under this row lock',
    member_version   BIGINT        NOT NULL DEFAULT 0 COMMENT 'bumped by every change of the member rows (add, remove, role, mute) and by dissolve; member caches compare it',
    max_members      INT           NOT NULL COMMENT 'member limit of this group, from logic.group_max_members when it was created',
    created_at       DATETIME(3)   NOT NULL COMMENT 'when the group was created',
    updated_at       DATETIME(3)   NOT NULL COMMENT 'when the row last changed',
    UNIQUE KEY uk_conversation_id (conversation_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='groups: one row per group conversation; its row lock serializes membership changes';
