/**
 * The catalogue of errors a client can see. Each has a stable `code` (the contract clients
 * branch on) and an HTTP status. Anything that is not an AppError is a bug and becomes a 500.
 */
export const ERRORS = {
  validation_failed: { status: 400, title: 'The request is not valid' },
  bad_request: { status: 400, title: 'Bad request' },
  invalid_cursor: { status: 400, title: 'The cursor is not one this endpoint returned' },
  unauthorized: { status: 401, title: 'Authentication required' },
  invalid_credentials: { status: 401, title: 'Email or password is wrong' },
  forbidden: { status: 403, title: 'Not allowed' },
  not_found: { status: 404, title: 'Not found' },
  email_taken: { status: 409, title: 'An account with this email exists' },
  dates_unavailable: { status: 409, title: 'The property is already booked for some of these dates' },
  request_in_progress: { status: 409, title: 'A request with this Idempotency-Key is still in progress' },
  conflict: { status: 409, title: 'Conflicts with existing state' },
  payload_too_large: { status: 413, title: 'Request body too large' },
  unsupported_media_type: { status: 415, title: 'Unsupported content type' },
  check_in_in_past: { status: 422, title: 'Check-in is in the past' },
  too_many_guests: { status: 422, title: 'More guests than the property allows' },
  stay_too_long: { status: 422, title: 'Stays are limited to 90 nights' },
  property_inactive: { status: 422, title: 'The property is not taking bookings' },
  idempotency_key_reused: { status: 422, title: 'This Idempotency-Key was used with a different request' },
  rate_limited: { status: 429, title: 'Too many requests' },
  service_unavailable: { status: 503, title: 'Service unavailable' },
  overloaded: { status: 503, title: 'The service is overloaded; retry later' },
  internal_error: { status: 500, title: 'Internal server error' },
} as const satisfies Record<string, { status: number; title: string }>;

export type ErrorCode = keyof typeof ERRORS;

export interface FieldError {
  path: string;
  message: string;
}

export class AppError extends Error {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    message?: string,
    readonly errors?: FieldError[],
  ) {
    super(message ?? ERRORS[code].title);
    this.name = 'AppError';
    this.status = ERRORS[code].status;
  }
}

/**
 * Thrown by a handler for a failure no retry can fix: the message goes DEAD at once. Defined by
 * the outbox, whose runner must recognise it and imports nothing of the application; the events
 * consumer (src/events/consumer.ts) treats it the same way.
 */
export { PermanentError } from './outbox/index.ts';
