import { z } from 'zod';
import { noControlCharacters, singleLineText } from '../validation.ts';

export const emailSchema = noControlCharacters(z.string()).trim().max(254).email();

export const registerBody = z.strictObject({
  email: emailSchema,
  password: z.string().min(10, 'must be at least 10 characters').max(200),
  name: singleLineText(1, 100),
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
