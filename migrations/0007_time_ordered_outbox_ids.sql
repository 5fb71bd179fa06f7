-- Time-ordered outbox ids (ADR 0018). A random UUIDv4 puts every new message's entry at a random
-- page of outbox_public_id_unique; once the DONE history outgrows shared_buffers, each insert and
-- each non-HOT update (claim, DONE) reads such a page from disk. A UUIDv7 starts with the time in
-- milliseconds, so new entries land at the index's right edge, which stays in memory.
--
-- Built from gen_random_uuid() (PostgreSQL 13+) rather than PostgreSQL 18's uuidv7(), so any
-- server DATABASE_URL points at runs it: the first 48 bits become the Unix time in milliseconds,
-- and the version nibble goes from 4 (0100) to 7 (0111) by setting bits 52 and 53. The variant
-- bits and the 74 random bits are gen_random_uuid()'s.
CREATE FUNCTION outbox_uuid_v7() RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
  SELECT encode(
           set_bit(set_bit(
             overlay(uuid_send(gen_random_uuid())
                     placing substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                     FROM 1 FOR 6),
             52, 1), 53, 1),
           'hex')::uuid
$$;--> statement-breakpoint
ALTER TABLE "outbox" ALTER COLUMN "public_id" SET DEFAULT outbox_uuid_v7();
