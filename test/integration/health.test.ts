import { LogCapture } from '../helpers/app.ts';
import { createLogger } from '../../src/logger.ts';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { createDatabase } from '../../src/db/client.ts';
import { buildApp } from '../../src/http/app.ts';

describe('GET /health without a database', () => {
  it('answers 503 with db "down" instead of failing', async () => {
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    const logs = new LogCapture();
    const db = createDatabase('postgres://nobody:nothing@127.0.0.1:1/none', { max: 1 });
    const app = await buildApp({
      config: loadConfig({ DATABASE_URL: 'postgres://nobody:nothing@127.0.0.1:1/none' }),
      db,
      logger: createLogger('info', 'api', logs),
    });
    try {
      const res = await app.inject({ method: 'GET', url: '/health' });
      expect(res.statusCode).toBe(503);
      expect(res.json()).toMatchObject({ status: 'error', db: 'down' });
      expect(logs.text).toContain('ECONNREFUSED');
    } finally {
      await app.close();
      await db.close();
    }
  });
});
