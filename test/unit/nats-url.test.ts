import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { describeNats, natsConnectionOptions } from '../../src/events/connection.ts';
import { parseNatsServers } from '../../src/events/nats-url.ts';

/* NATS_URL as a cluster's list: every server to the client, credentials once, never in a message. */

const problemsOf = (env: Record<string, string>): string => {
  try {
    loadConfig(env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as ConfigError).problems.join('\n');
  }
  throw new Error('loadConfig accepted it');
};

describe('NATS_URL with several servers', () => {
  it('gives the client every server, with the credentials written once', () => {
    const url = 'nats://relay:p%40ss@n1:4222, nats://n2:4223,nats://n3';
    expect(loadConfig({ NATS_URL: url }).NATS_URL).toBe(url);
    expect(natsConnectionOptions(url)).toEqual({ servers: ['n1:4222', 'n2:4223', 'n3:4222'], user: 'relay', pass: 'p@ss' });
    expect(natsConnectionOptions('tls://a:pw@n1:4443,tls://a:pw@n2:4443')).toEqual({
      servers: ['n1:4443', 'n2:4443'],
      user: 'a',
      pass: 'pw',
      tls: {},
    });
  });

  it('describes every server and no credential', () => {
    expect(describeNats('nats://relay:s3cret@n1:4222,nats://relay:s3cret@n2:4222,nats://[::1]:4222')).toBe('n1:4222,n2:4222,[::1]:4222');
    expect(describeNats('nats://relay:s3cret@n1:4222,http://x')).toBe('(unparseable NATS_URL)');
  });

  it('refuses a bad server at start, naming which, never repeating the password', () => {
    const cases: [string, RegExp][] = [
      ['nats://n1:4222,http://n2:4222', /NATS_URL: server 2 of 2: must start with nats:\/\/ or tls:\/\//],
      ['nats://n1:4222,tls://n2:4222', /server 2 of 2: n2:4222 is tls:\/\/ but an earlier server is nats:/],
      ['nats://a:s3cret@n1,nats://b:s3cret@n2', /server 2 of 2: n2:4222 carries other credentials/],
      ['nats://a:s3cret@n1,nats://a:other-s3cret@n2', /carries other credentials/],
      ['nats://n1:4222,n2:4222', /server 2 of 2: must start with nats:\/\/ or tls:\/\//],
      ['nats://a:s3cret@n1:99999', /NATS_URL: not a URL/],
      ['nats://n1:4222/stayhub', /a path or query/],
      [',,', /NATS_URL: no server/],
    ];
    for (const [url, message] of cases) {
      const problems = problemsOf({ NATS_URL: url });
      expect(problems, url).toMatch(message);
      expect(problems, url).not.toContain('s3cret');
    }
  });

  it('is unset when empty, as before', () => {
    expect(loadConfig({ NATS_URL: '' }).NATS_URL).toBeUndefined();
    expect(loadConfig({}).NATS_URL).toBeUndefined();
  });

  it('keeps one URL as it was', () => {
    expect(parseNatsServers('nats://n1')).toEqual({ servers: ['n1:4222'], tls: false });
  });
});
