-- From here on the outbox's tables, indexes and SQL functions are made and changed by the outbox's
-- own migrations (src/outbox/migrations/, applied by src/outbox/migrate.ts after these), and no
-- longer declared in src/db/schema/: this migration's snapshot leaves them out, so drizzle-kit
-- generates nothing for them. The migrations before this one stay as they are: databases applied
-- them, and the outbox's baseline adopts what they made (ADR 0050).
SELECT 1;
