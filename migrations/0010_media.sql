-- Media uploads (MEDIA, 23): one row per key logic handed out. The bytes
-- live in the object store (S3 or the embedded local store); this row
-- says who may use the key in a message and what the store holds under
-- it once the upload was completed and sniffed (docs/decisions.md 103).

CREATE TABLE IF NOT EXISTS t_media (
    media_key      VARCHAR(32)  NOT NULL PRIMARY KEY COMMENT 'prefix/22 base62 digits, chosen by logic',
    uploader_id    BIGINT       NOT NULL COMMENT 'the user the key was handed to; only they complete it or send it first',
    kind           VARCHAR(8)   NOT NULL COMMENT 'image, voice, video, file or avatar',
    size           BIGINT       NOT NULL COMMENT 'the exact byte count the upload was signed for',
    content_type   VARCHAR(127) NOT NULL COMMENT 'declared at upload; the sniffed type once completed',
    completed_at   DATETIME(3)  NULL COMMENT 'when logic checked the stored object; NULL while the upload is pending',
    created_at     DATETIME(3)  NOT NULL COMMENT 'when the upload was signed',
    KEY idx_uploader (uploader_id, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='media objects: who uploaded each key and what it holds';
