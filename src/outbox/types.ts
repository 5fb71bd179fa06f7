import type { Deferral } from './lanes.ts';

/*
 * The words the runner (src/outbox/runner/) and the store (src/outbox/settle.ts) share: what a
 * run decided about a message, and how an outcome is reported. Here, below both, so the store
 * imports nothing from the runner and the dependency points one way: runner → store → these types.
 */

// --- verdicts: decided by src/outbox/runner/verdict.ts, recorded by src/outbox/settle.ts --------

export interface HandlerFailure {
  handler: string;
  error: unknown;
  durationMs: number;
}

/** A failure as recorded and reported: "handler: ErrorClass: message", email addresses removed. */
export interface DescribedFailure {
  handler: string;
  error: string;
  durationMs: number;
}

export type Verdict =
  /**
   * Every handler has now succeeded. `handler` is the one whose success completes the message
   * (recorded with DONE, in the same write) and how long it ran; null when every handler had
   * already succeeded on an earlier attempt.
   */
  | { readonly kind: 'done'; readonly handler: string | null; readonly durationMs: number }
  /** Some failed, none for good, attempts left: due again after `delaySeconds`; only `failed` run then. */
  | {
      readonly kind: 'retry';
      readonly delaySeconds: number;
      readonly error: string;
      readonly succeeded: readonly string[];
      readonly failures: readonly DescribedFailure[];
    }
  /**
   * Every failure was a handler's downstream being unavailable (DependencyUnavailableError): due
   * again after `delaySeconds`, and the attempt the claim counted is given back. Never DEAD.
   */
  | {
      readonly kind: 'postpone';
      readonly delaySeconds: number;
      readonly error: string;
      readonly succeeded: readonly string[];
      readonly failures: readonly DescribedFailure[];
    }
  /** Out of attempts, every failure permanent, or unprocessable (`failures` empty): DEAD with `error`. */
  | {
      readonly kind: 'dead';
      readonly error: string;
      readonly succeeded: readonly string[];
      readonly failures: readonly DescribedFailure[];
    }
  /** No handler for the topic: left PENDING, looked at again later, attempt not counted. */
  | { readonly kind: 'unknown_topic' };

/** A deferral as dispatch decides it: the lane write (src/outbox/lanes.ts) and, for a failure, what to report. */
export interface LaneDeferral extends Deferral {
  durationMs: number;
}

// --- outcomes: reported by src/outbox/runner/outcomes.ts (the events and logs it documents) -----

export type Outcome = 'done' | 'retry' | 'postponed' | 'dead' | 'unknown_topic' | 'handed_back';

export interface OutcomeEvent {
  messageId: string;
  topic: string;
  handler: string | null;
  attempt: number;
  outcome: Outcome;
  durationMs: number;
  error?: string;
}

export interface WorkerEvents {
  claimed: [{ count: number }];
  outcome: [OutcomeEvent];
}

/** Where the store reports an outcome once it is recorded (the runner's OutcomeReporter). */
export interface OutcomeSink {
  /** Whether an outcome of this kind would be seen by anyone: build the event only then. */
  wants(outcome: Outcome): boolean;
  outcome(event: OutcomeEvent): void;
}

// --- payload schemas: the application's, given to the worker (WorkerOptions.payloadSchemas) -----

/**
 * A topic's payload schema as the worker uses it: a zod schema fits (the outbox imports no
 * validation library; it needs only this). A payload that fails its schema is dead at once.
 */
export interface PayloadSchema {
  safeParse(payload: unknown): { success: true; data: unknown } | { success: false; error: { issues: readonly PayloadIssue[] } };
}

export interface PayloadIssue {
  readonly path: readonly PropertyKey[];
  readonly message: string;
}
