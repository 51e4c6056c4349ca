-- User profiles for the business API (UpsertUser / GetUser): nickname and
-- avatar exist since 0001; extra holds the business's own JSON object.

ALTER TABLE t_users
    ADD COLUMN extra BLOB NULL COMMENT 'business JSON object (compact, at most 4 KiB) set by the API''s UpsertUser; NULL when never set'
    AFTER avatar;
