import { z } from 'zod';
import { displayText, noControlCharacters } from '../validation.ts';

export const emailSchema = noControlCharacters(z.string()).trim().max(254).email();

/**
 * A person's name, shown to others (a host sees the guest's in an email subject and body): no
 * control characters, no invisible or text-direction ones (src/validation.ts says which and why).
 * Sign-up and `npm run create-admin` both take it.
 */
export const userName = displayText(1, 100);

export const registerBody = z.strictObject({
  email: emailSchema,
  password: z.string().min(10, 'must be at least 10 characters').max(200),
  name: userName,
  // `admin` exists but cannot be self-registered (see `npm run create-admin`).
  role: z.enum(['guest', 'host']),
});
export type RegisterBody = z.infer<typeof registerBody>;

export const loginBody = z.strictObject({
  email: emailSchema,
  password: z.string().min(1).max(200),
});
export type LoginBody = z.infer<typeof loginBody>;

export const userResponse = z.object({
  id: z.string().uuid(),
  email: z.string(),
  name: z.string(),
  role: z.enum(['guest', 'host', 'admin']),
  createdAt: z.string(),
});
export type UserResponse = z.infer<typeof userResponse>;

export const authResponse = z.object({ user: userResponse, token: z.string() });
