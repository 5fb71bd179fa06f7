-- Handler lanes (src/outbox/lanes.ts): a handler that asks for its own lane (the events relay) has
-- its failed or waiting work moved into a row of its own, keyed `<handler>@<key>`, so that while
-- it retries only that handler's later work of the key waits, not the message's other handlers'.
-- Both columns are null on every message as written; adding a nullable column without a default
-- rewrites nothing, so this is instant on a large outbox.
ALTER TABLE "outbox" ADD COLUMN "lane" text;--> statement-breakpoint
ALTER TABLE "outbox" ADD COLUMN "origin_id" uuid;
