import pg from 'pg';
import type { Logger } from 'pino';
import { WAL_MESSAGE_PREFIX, WAL_PUBLICATION } from './wal-messages.ts';

/*
 * A running worker's reader of the outbox's replication slot (OUTBOX_WRITES=wal, ADR 0056): the
 * slot streamed over a replication connection, as a subscriber reads it, so the server decodes
 * each transaction once, as it commits, and sends it at once. Reading it with a statement instead
 * (outbox_materialize, what --once and --until-empty do) builds a decoding context per call:
 * 15–25 ms of the server's CPU each time, found or not, and as much on the way from a commit to
 * its handler.
 *
 * What it does with what it receives:
 * - pgoutput sends a transaction at its commit: 'B'egin, its 'M'essages, 'C'ommit with the end of
 *   the transaction in the WAL. The messages of whole transactions wait here until written.
 * - Written by outbox_make_rows (src/outbox/migrations/0005_messages_from_the_wal.sql), all that
 *   waits in one statement, at most one in flight: under load, many transactions a statement.
 *   The position up to which the slot's messages are rows is written with them.
 * - Only after that commit does the server hear that the slot may move (a standby status update
 *   with the last end written). A reader that dies before it starts again from the slot's
 *   position, and what it then receives again is skipped by the recorded position: nothing is lost
 *   and nothing made twice.
 * - A slot serves one reader: a second worker's start is refused while the first streams, and it
 *   tries again every few seconds, so another worker takes over within seconds of the first
 *   stopping.
 */

/** Microseconds between the Unix epoch and PostgreSQL's (2000-01-01). */
const PG_EPOCH_US = 946_684_800_000_000n;

/** Tries to take the slot again this long after losing it (or being refused it). */
const RETRY_MS = 2000;

/** A status update at least this often, so the server does not drop a quiet reader (wal_sender_timeout, 60 s). */
const STATUS_EVERY_MS = 10_000;

/** At most this many messages a statement. */
const MAX_BATCH = 5000;

interface Received {
  end: string;
  message: string;
}

export interface WalStreamOptions {
  connectionString: string;
  slot: string;
  /** Where rows are written (the worker's pool). */
  pool: pg.Pool;
  logger: Logger;
  /** Told how many rows each write made. */
  onRows?: (made: number) => void;
}

const lsnText = (v: bigint) => `${(v >> 32n).toString(16).toUpperCase()}/${(v & 0xffffffffn).toString(16).toUpperCase()}`;

/** START_REPLICATION as a query node-postgres can run: the copy data comes to `onData`. */
class Replication {
  constructor(
    readonly text: string,
    private readonly onData: (chunk: Buffer) => void,
    private readonly onEnd: (err?: Error) => void,
  ) {}
  submit(connection: { query(text: string): void }): void {
    connection.query(this.text);
  }
  handleCopyData(msg: { chunk: Buffer }): void {
    this.onData(msg.chunk);
  }
  handleError(err: Error): void {
    this.onEnd(err);
  }
  handleReadyForQuery(): void {
    this.onEnd();
  }
  handleRowDescription(): void {}
  handleDataRow(): void {}
  handleCommandComplete(): void {}
  handleEmptyQuery(): void {}
  handlePortalSuspended(): void {}
  handleCopyInResponse(): void {}
}

export class WalStream {
  private client: pg.Client | undefined;
  private stopped = false;
  private running: Promise<void> | undefined;
  /** Messages of whole transactions, not yet written. */
  private waiting: Received[] = [];
  /** The open transaction's messages (between its 'B' and its 'C'), and whether one is open. */
  private open: string[] = [];
  private inTransaction = false;
  private writing: Promise<void> | undefined;
  /** The end of the last transaction whose rows are committed: what the slot may move to. */
  private written = 0n;
  /** The end of everything received so far (keepalives included). */
  private received = 0n;
  private statusTimer: NodeJS.Timeout | undefined;
  private wake: (() => void) | undefined;

  constructor(private readonly opts: WalStreamOptions) {}

  start(): void {
    this.running ??= this.loop();
  }

  /** Stops reading; what was received and not yet written is received again by the next reader. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.wake?.();
    await this.client?.end().catch(() => undefined);
    await this.running;
    await this.writing;
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      try {
        await this.stream();
      } catch (err) {
        if (this.stopped) break;
        const busy = (err as { code?: string }).code === '55006'; // another worker holds the slot
        (busy ? this.opts.logger.debug : this.opts.logger.warn).call(this.opts.logger, { err }, 'outbox WAL stream: not reading the slot');
      }
      this.waiting = [];
      this.open = [];
      this.inTransaction = false;
      if (!this.stopped) await new Promise<void>((resolve) => ((this.wake = resolve), setTimeout(resolve, RETRY_MS).unref()));
    }
  }

  private async stream(): Promise<void> {
    const client = new pg.Client({
      connectionString: this.opts.connectionString,
      replication: 'database',
      application_name: 'stayhub-worker-wal',
    } as pg.ClientConfig);
    this.client = client;
    client.on('error', () => undefined); // the stream's end below says what happened
    await client.connect();
    try {
      if (this.stopped) return;
      this.written = 0n;
      this.received = 0n;
      this.statusTimer = setInterval(() => this.sendStatus(false), STATUS_EVERY_MS).unref();
      await new Promise<void>((resolve, reject) => {
        const q = new Replication(
          `START_REPLICATION SLOT ${pg.escapeIdentifier(this.opts.slot)} LOGICAL 0/0 ` +
            `(proto_version '1', publication_names '${WAL_PUBLICATION}', messages 'true')`,
          (chunk) => this.onCopyData(chunk),
          (err) => (err ? reject(err) : resolve()),
        );
        (client as unknown as { query(q: Replication): void }).query(q);
        client.once('end', () => resolve());
      });
    } finally {
      clearInterval(this.statusTimer);
      this.client = undefined;
      await client.end().catch(() => undefined);
    }
  }

  private onCopyData(chunk: Buffer): void {
    const kind = chunk[0];
    if (kind === 0x6b /* k: keepalive */) {
      const walEnd = chunk.readBigUInt64BE(1);
      this.noteReceived(walEnd);
      if (chunk[17] === 1) this.sendStatus(true);
      return;
    }
    if (kind !== 0x77 /* w: WAL data */) return;
    const walEnd = chunk.readBigUInt64BE(9);
    this.onPgoutput(chunk.subarray(25));
    this.noteReceived(walEnd);
  }

  /** Everything up to `walEnd` has been sent; with no transaction open or waiting, it is all done. */
  private noteReceived(walEnd: bigint): void {
    if (walEnd > this.received) this.received = walEnd;
    if (!this.inTransaction && this.waiting.length === 0 && !this.writing && this.received > this.written) {
      this.written = this.received;
    }
  }

  private onPgoutput(m: Buffer): void {
    switch (m[0]) {
      case 0x42: // B: a transaction begins
        this.open = [];
        this.inTransaction = true;
        return;
      case 0x4d: {
        // M: flags (1), lsn (8), prefix (NUL-terminated), length (4), content
        const prefixEnd = m.indexOf(0, 10);
        if (m.toString('utf8', 10, prefixEnd) !== WAL_MESSAGE_PREFIX) return;
        const length = m.readUInt32BE(prefixEnd + 1);
        this.open.push(m.toString('utf8', prefixEnd + 5, prefixEnd + 5 + length));
        return;
      }
      case 0x43: {
        // C: flags (1), commit lsn (8), end lsn (8), time (8)
        const end = lsnText(m.readBigUInt64BE(10));
        // A transaction with none of ours (another prefix) needs no row: the slot moves past it
        // with the next status.
        for (const message of this.open) this.waiting.push({ end, message });
        this.open = [];
        this.inTransaction = false;
        this.writeWaiting();
        return;
      }
      default:
    }
  }

  /** One write in flight; what arrives meanwhile goes into the next. */
  private writeWaiting(): void {
    if (this.writing || this.waiting.length === 0) return;
    const batch = this.waiting.splice(0, MAX_BATCH);
    const last = batch[batch.length - 1]!.end;
    const received = `[${batch.map((r) => `{"end":"${r.end}","message":${r.message}}`).join(',')}]`;
    this.writing = this.opts.pool
      .query<{ made: number }>({
        name: 'outbox-make-rows',
        text: 'select outbox_make_rows($1, $2::json) as made',
        values: [this.opts.slot, received],
      })
      .then(({ rows }) => {
        this.written = parseLsn(last);
        this.opts.onRows?.(rows[0]!.made);
        this.sendStatus(false);
      })
      .catch((err: unknown) => {
        // Not written: the slot has not moved past them, so a new stream gives them again.
        this.opts.logger.warn({ err }, 'outbox WAL stream: rows not written; reading the slot again');
        void this.client?.end();
      })
      .finally(() => {
        this.writing = undefined;
        this.writeWaiting();
      });
  }

  /** Tells the server what is written: the slot may move up to there. */
  private sendStatus(replyNow: boolean): void {
    const connection = (this.client as unknown as { connection?: { sendCopyFromChunk(b: Buffer): void } })?.connection;
    if (!connection || this.written === 0n) return;
    const b = Buffer.alloc(34);
    b[0] = 0x72; // r: standby status update
    b.writeBigUInt64BE(this.written, 1); // written
    b.writeBigUInt64BE(this.written, 9); // flushed
    b.writeBigUInt64BE(this.written, 17); // applied
    b.writeBigInt64BE(BigInt(Date.now()) * 1000n - PG_EPOCH_US, 25);
    b[33] = replyNow ? 1 : 0;
    try {
      connection.sendCopyFromChunk(b);
    } catch {
      // the connection is going; the next stream starts from the slot's position
    }
  }
}

function parseLsn(text: string): bigint {
  const [hi, lo] = text.split('/');
  return (BigInt(`0x${hi}`) << 32n) | BigInt(`0x${lo}`);
}
