import { closeSync, linkSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, unlinkSync, writeSync } from 'node:fs';
import path from 'node:path';
import { procStat } from './proc-stat.ts';

/*
 * One `npm start` per data folder. A second one in the same folder used to stop the first one's
 * PostgreSQL (taking it for a postmaster left behind by a killed run), print "ready" while the
 * first one's API answered, and leave the first without a database. The supervisor now holds a
 * lock file beside the data folder for as long as it runs its PostgreSQL: a second start finds it
 * and refuses, naming the first; a lock whose process is gone (SIGKILLed) is taken over, and only
 * then is a postmaster still running in the folder an orphan to stop.
 *
 * A file, not flock (Node has none) or the postmaster's own postmaster.pid (written only once
 * PostgreSQL runs, and its process outlives a killed supervisor). Written whole before it appears
 * (link(2) of a finished file, which fails if the name exists), so a reader never sees half of one.
 */

/** Who holds the lock, as written into it. */
export interface LockHolder {
  pid: number;
  /** /proc start time: tells the holder from a later process that reuses its pid. */
  startTime?: string;
  startedAt: string;
  /** The folder it was started in. */
  cwd: string;
  /** What it runs, in words for the refusal: "its API at http://…, PostgreSQL on 127.0.0.1:54320". */
  serves: string;
}

export class DataDirInUseError extends Error {
  constructor(
    readonly dataDir: string,
    readonly holder: LockHolder,
  ) {
    super(
      `another \`npm start\` is running with the data folder ${dataDir}: pid ${holder.pid}, started ${holder.startedAt} in ${holder.cwd}` +
        `${holder.serves ? `, ${holder.serves}` : ''}. Stop it first (Ctrl-C in its terminal, or kill ${holder.pid}); ` +
        `for a second instance set EMBEDDED_PG_DIR, EMBEDDED_PG_PORT and PORT to values of its own`,
    );
    this.name = 'DataDirInUseError';
  }
}

export interface DataDirLock {
  file: string;
  /** Removes the lock if it is still ours. Synchronous: also called from an 'exit' handler. */
  release(): void;
}

export const lockFileOf = (dataDir: string) => `${path.resolve(dataDir)}.lock`;

const startTimeOf = (pid: number) => procStat(pid)?.[19];

function readHolder(file: string): LockHolder | undefined {
  try {
    const holder = JSON.parse(readFileSync(file, 'utf8')) as LockHolder;
    return Number.isInteger(holder.pid) && holder.pid > 0 ? holder : undefined;
  } catch {
    return undefined; // gone meanwhile, or not ours to read: taken as stale
  }
}

/** Alive: its pid runs, and (where /proc tells) it is the same process, not a later one with its pid. */
function isAlive(holder: LockHolder): boolean {
  const stat = procStat(holder.pid);
  if (stat) return stat[0] !== 'Z' && stat[0] !== 'X' && (holder.startTime === undefined || stat[19] === holder.startTime);
  try {
    process.kill(holder.pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Takes `dataDir`'s lock for this process, or throws DataDirInUseError naming the live process
 * that holds it. A lock left by a process that is gone is taken over; `onTakeOver` hears of it.
 */
export function lockDataDir(dataDir: string, serves: string, onTakeOver?: (stale: LockHolder) => void): DataDirLock {
  const file = lockFileOf(dataDir);
  mkdirSync(path.dirname(file), { recursive: true });
  const me: LockHolder = {
    pid: process.pid,
    startTime: startTimeOf(process.pid),
    startedAt: new Date().toISOString(),
    cwd: process.cwd(),
    serves,
  };
  const mine = JSON.stringify(me);
  const draft = `${file}.${process.pid}.draft`;
  const fd = openSync(draft, 'w', 0o644);
  try {
    writeSync(fd, mine);
  } finally {
    closeSync(fd);
  }
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        linkSync(draft, file);
        break;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt >= 3) throw err;
      }
      const holder = readHolder(file);
      if (holder && isAlive(holder)) throw new DataDirInUseError(path.resolve(dataDir), holder);
      takeOver(file, holder);
      if (holder) onTakeOver?.(holder);
    }
  } finally {
    rmSync(draft, { force: true });
  }
  return {
    file,
    release() {
      try {
        if (readFileSync(file, 'utf8') === mine) unlinkSync(file);
      } catch {
        // already gone
      }
    },
  };
}

/**
 * Moves a stale lock aside. Two starts taking over the same stale lock at once: the second may
 * move the first one's fresh lock; it puts it back (link fails if a third took the name) and finds
 * it held on its next attempt.
 */
function takeOver(file: string, stale: LockHolder | undefined): void {
  const aside = `${file}.${process.pid}.stale`;
  try {
    renameSync(file, aside);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return; // another start took it over first
    throw err;
  }
  const moved = readHolder(aside);
  if (moved && stale && (moved.pid !== stale.pid || moved.startTime !== stale.startTime)) {
    try {
      linkSync(aside, file);
    } catch {
      // the name was taken again meanwhile: the next attempt reads who holds it
    }
  }
  rmSync(aside, { force: true });
}
