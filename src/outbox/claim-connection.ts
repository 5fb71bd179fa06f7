import pg from 'pg';
import type { Db } from '../db/client.ts';
import {
  CLAIM,
  claimAgedOn,
  claimIdsOn,
  claimOn,
  laterOfKeys,
  type ClaimedMessage,
  type ClaimOptions,
  type NotifiedMessage,
} from './claim.ts';
import { applyPlannedSettings, explainStatement, PlannedConnection } from './planned-connection.ts';
import { materialize } from './wal-messages.ts';

/*
 * The claim's own connection (a PlannedConnection: src/outbox/planned-connection.ts says what its
 * settings are and why the worker has its own connections).
 *
 * The claim (src/outbox/claim.ts) runs on every wake-up, so its cost is most of the time between a
 * COMMIT and its handler. Sent as a named prepared statement, PostgreSQL parses it once per
 * connection and, from a cached plan, does not plan it again: 0.51 ms a claim on an idle outbox,
 * against 0.82 ms planned on every execution and 1.06 ms as it was sent before (a simple query
 * with its values inlined, planner settings and asynchronous commit set per statement).
 *
 * Plans made on a quiet or tiny outbox without the settings chose a bitmap scan and a sort of the
 * whole burst (42–89 ms a claim), or checked each candidate's key against the whole table under a
 * join filter (5 s to 64 s a claim of 500, on a plan made while the outbox held three rows). With
 * them, what remains whatever the statistics say is the ordered walks of
 * outbox_pending_available_idx and outbox_pending_turn_idx, each stopping at its limit, the
 * per-key check as a probe of outbox_key_idx by key (written so that no other index can serve it:
 * src/outbox/claim.ts), and index lookups for the update. The outer `order by c.id` of at most a
 * batch keeps its sort: nothing else can do it. test/integration/outbox/claim.test.ts makes the
 * plan on a tiny, a quiet and a never-analyzed outbox and checks the plan a burst is then claimed
 * with.
 */

/**
 * A client with the claim's settings, for tools that claim or explain the claim as the worker
 * does (the bench, the plan tests): connected, settings applied and checked. The caller ends it.
 */
export async function connectClaimClient(config: pg.ClientConfig): Promise<pg.Client> {
  const client = new pg.Client(config);
  await client.connect();
  try {
    await applyPlannedSettings(client);
  } catch (err) {
    await client.end().catch(() => undefined);
    throw err;
  }
  return client;
}

/** The worker's claim connection: one is enough, a worker has at most one claim in flight. */
export class ClaimConnection extends PlannedConnection {
  private readonly walSlot: string | undefined;
  /** Where the slot may be moved to: what the previous materialize read is rows, or held no message. */
  private walMoveTo: string | null = null;
  private streaming = false;

  constructor(db: Db, opts: { applicationName?: string; onOpen?: (pool: pg.Pool) => void; walSlot?: string } = {}) {
    const { walSlot, ...rest } = opts;
    super(db, { ...rest, role: 'claim' });
    this.walSlot = walSlot;
  }

  /**
   * With a WAL slot (OUTBOX_WRITES=wal, src/outbox/wal-messages.ts), each claim of a worker that
   * does not stream the slot (--once, --until-empty) first makes rows of the messages committed to
   * the WAL since the last one, so a drain drains them too. A slot another worker is streaming
   * cannot be read here (55006): that worker makes the rows, and the claim goes on.
   */
  claimBatch(opts: ClaimOptions): Promise<ClaimedMessage[]> {
    return this.use(async (client) => {
      if (this.walSlot !== undefined && !this.streaming) {
        try {
          this.walMoveTo = (await materialize(client, this.walSlot, this.walMoveTo)).moveTo;
        } catch (err) {
          if ((err as { code?: string }).code !== '55006') throw err;
        }
      }
      return claimOn(client, opts);
    });
  }

  /**
   * Claims the messages the worker was told about, those of them that are due (src/outbox/claim.ts
   * claimIdsOn). Only a worker that streams its slot, or has none, asks: a drain's claim first
   * reads the slot, which only the walk does.
   */
  claimIds(messages: readonly NotifiedMessage[], opts: Omit<ClaimOptions, 'limit'>): Promise<ClaimedMessage[]> {
    return this.use((client) => claimIdsOn(client, messages, opts));
  }

  /**
   * The poll's walk of messages without a turn alone (src/outbox/claim.ts CLAIM_AGED), between its
   * full walks. Only the running worker asks, and it reads no slot: it streams it, or has none.
   */
  claimAged(opts: ClaimOptions): Promise<ClaimedMessage[]> {
    return this.use((client) => claimAgedOn(client, opts));
  }

  /** The running worker streams the slot (src/outbox/wal-stream.ts): its claims no longer read it. */
  streamsWal(): void {
    this.streaming = true;
  }

  /** Whether any of `keys` has a message still live (src/outbox/claim.ts laterOfKeys). */
  laterOfKeys(keys: readonly string[]): Promise<boolean> {
    return this.use((client) => laterOfKeys(client, keys));
  }
}

/**
 * EXPLAIN of the claim as the worker runs it: the plan cached for the claim statement on `client`
 * (a connection with the claim's session settings: connectClaimClient), run with these values
 * when `analyze` is set and rolled back (explainStatement). For the bench's report and the plan
 * tests.
 */
export function explainClaim(
  client: pg.ClientBase,
  opts: ClaimOptions,
  how: { analyze?: boolean; buffers?: boolean } = {},
): Promise<string> {
  return explainStatement(client, CLAIM, [opts.limit, opts.claimId, opts.leaseSeconds, opts.lanes ?? []], how);
}
