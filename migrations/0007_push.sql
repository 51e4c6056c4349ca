-- Offline push: the push token each device registered (one per user and
-- device, replaced on change; a token moves with its device when another
-- user registers it) and each user's notification preview setting.

CREATE TABLE IF NOT EXISTS t_push_tokens (
    user_id     BIGINT       NOT NULL COMMENT 'the device owner',
    device_id   VARCHAR(64)  NOT NULL COMMENT 'the device id of AUTH',
    platform    TINYINT      NOT NULL COMMENT '1 APNs, 2 FCM, 3 push gateway',
    token       VARCHAR(512) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'the provider token of the app install',
    topic       VARCHAR(255) NOT NULL DEFAULT '' COMMENT 'APNs: the apns-topic (bundle id)',
    sandbox     TINYINT      NOT NULL DEFAULT 0 COMMENT 'APNs: 1 for the development environment',
    gateway     VARCHAR(64)  NOT NULL DEFAULT '' COMMENT 'push gateway: the configured gateway name',
    updated_at  DATETIME(3)  NOT NULL COMMENT 'when it was last registered',
    PRIMARY KEY (user_id, device_id),
    UNIQUE KEY uk_platform_token (platform, token)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='offline push tokens per user and device';

CREATE TABLE IF NOT EXISTS t_push_settings (
    user_id     BIGINT      NOT NULL PRIMARY KEY COMMENT 'the user',
    preview     TINYINT     NOT NULL DEFAULT 1 COMMENT 'what a notification shows: 1 sender and text, 2 sender only, 3 nothing',
    updated_at  DATETIME(3) NOT NULL COMMENT 'when it was last set'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='per-user offline push settings; no row = full preview';
