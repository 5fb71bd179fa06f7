import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';

/*
 * The trace collector the tests, the bench and the trace picture export to: a real OTLP/HTTP
 * server on 127.0.0.1 that takes POST /v1/traces, the path every exporter appends to
 * OTEL_EXPORTER_OTLP_ENDPOINT. An http/json body (gzipped or not) is decoded into spans; an
 * http/protobuf one is only counted, which is all the bench needs, and spares us a protobuf decoder.
 */

/** One span as a receiver decoded it, with the `service.name` of the process that sent it. */
export interface ReceivedSpan {
  service: string;
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  name: string;
  /** ms since the epoch, to the microsecond. */
  start: number;
  end: number;
}

export interface OtlpReceiver {
  /** The base endpoint: OTEL_EXPORTER_OTLP_ENDPOINT. */
  url: string;
  /** The spans of every http/json export, in the order they came in, when `record` was not turned off. */
  spans: ReceivedSpan[];
  /** The content type of every export, when `record` was not turned off. */
  contentTypes: string[];
  /** Exports posted, recorded or not. */
  requests(): number;
  /** Bytes posted as they came over the wire (compressed ones compressed). */
  bytes(): number;
  /** Cuts the exporters' kept-alive connections and stops listening. */
  close(): Promise<void>;
}

export interface OtlpReceiverOptions {
  /** Default true. Off, it only counts: a bench run of many thousands of exports holds nothing. */
  record?: boolean;
}

/** An OTLP ExportTraceServiceRequest in its JSON encoding: only the fields a receiver reads. */
interface ExportRequest {
  resourceSpans?: {
    resource?: { attributes?: { key: string; value: { stringValue?: string } }[] };
    scopeSpans?: {
      spans?: {
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        startTimeUnixNano: string;
        endTimeUnixNano: string;
      }[];
    }[];
  }[];
}

// Nanoseconds arrive as decimal strings: past 2^53, a Number would round them.
const nanosToMs = (nanos: string) => Number(BigInt(nanos) / 1000n) / 1000;

function spansOf(body: ExportRequest): ReceivedSpan[] {
  return (body.resourceSpans ?? []).flatMap((rs) => {
    const service = rs.resource?.attributes?.find((a) => a.key === 'service.name')?.value.stringValue ?? '?';
    return (rs.scopeSpans ?? []).flatMap((ss) =>
      (ss.spans ?? []).map((s) => ({
        service,
        traceId: s.traceId,
        spanId: s.spanId,
        parentSpanId: s.parentSpanId ?? '',
        name: s.name,
        start: nanosToMs(s.startTimeUnixNano),
        end: nanosToMs(s.endTimeUnixNano),
      })),
    );
  });
}

export async function startOtlpReceiver(opts: OtlpReceiverOptions = {}): Promise<OtlpReceiver> {
  let requests = 0;
  let bytes = 0;
  const spans: ReceivedSpan[] = [];
  const contentTypes: string[] = [];

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => {
      bytes += c.length;
      if (opts.record !== false) chunks.push(c);
    });
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v1/traces') {
        res.writeHead(404).end();
        return;
      }
      requests++;
      const type = String(req.headers['content-type']);
      const json = type.startsWith('application/json');
      if (opts.record !== false) {
        contentTypes.push(type);
        if (json) {
          let raw = Buffer.concat(chunks);
          if (req.headers['content-encoding'] === 'gzip') raw = gunzipSync(raw);
          try {
            spans.push(...spansOf(JSON.parse(raw.toString('utf8')) as ExportRequest));
          } catch {
            // What a collector answers a body it cannot read; the exporter does not retry a 400.
            res.writeHead(400).end();
            return;
          }
        }
      }
      // An empty ExportTraceServiceResponse, in the encoding the request came in.
      if (json) res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      else res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    contentTypes,
    requests: () => requests,
    bytes: () => bytes,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
