// Blocking HTTP for plugins, over wasi:http (the host makes the request, and
// only to hosts the plugin is granted: `capabilities.http`). A sink's exports
// are synchronous, so this waits on the request's pollable rather than
// returning a promise; `fetch` is asynchronous and cannot be awaited there.
//
//   import { post } from '.../sdk/js/src/http.js';
//   post(url, JSON.stringify(body), { headers: { 'content-type': 'application/json' }, timeoutMs: 5000 });
//
// Failures are thrown as the contract's errors, with a message that names the
// method and URL (without its query or credentials), never a header value:
// a denied host or a bad URL or header is a ConfigError; a timeout, a refused
// or reset connection, a 5xx, 408 or 429 a RetryableError; any other 4xx or a
// redirect a FatalError (by `post`, or `response.check()`).
import { handle } from 'wasi:http/outgoing-handler@0.2.12';
import { Fields, OutgoingRequest, OutgoingBody, RequestOptions } from 'wasi:http/types@0.2.12';
import { ConfigError, RetryableError, FatalError } from './index.js';

const MAX_BODY = 16 << 20;
const enc = new TextEncoder();
const dec = new TextDecoder();

/** A response: `status`, `headers` (lower-case names to strings), `body` (bytes). */
export class Response {
  constructor(what, status, headers, body) {
    this.what = what;
    this.status = status;
    this.headers = headers;
    this.body = body;
  }
  /** The body as UTF-8 text. */
  text() { return dec.decode(this.body); }
  /** This response, or the error its status means (2xx passes). */
  check() {
    const s = this.status;
    if (s >= 200 && s < 300) return this;
    const msg = `${this.what}: status ${s}${this.body.length ? `: ${this.text().slice(0, 200)}` : ''}`;
    if (s >= 500 || s === 408 || s === 429) throw new RetryableError(msg);
    throw new FatalError(msg);
  }
}

function describe(method, url) {
  return `${method} ${url.protocol}//${url.host}${url.pathname}`;
}

const RETRYABLE_CODES = new Set([
  'DNS-timeout', 'DNS-error', 'destination-not-found', 'destination-unavailable',
  'destination-IP-unroutable', 'connection-refused', 'connection-terminated',
  'connection-timeout', 'connection-read-timeout', 'connection-write-timeout',
  'connection-limit-reached', 'HTTP-response-incomplete', 'HTTP-response-timeout',
]);

function transportError(what, code) {
  const tag = code?.tag ?? String(code);
  if (tag === 'HTTP-request-denied') {
    return new ConfigError(`${what}: the host denied the request: grant the host in \`capabilities.http\``);
  }
  if (tag === 'HTTP-request-URI-invalid' || tag === 'HTTP-request-method-invalid') {
    return new ConfigError(`${what}: ${tag}`);
  }
  const detail = code?.val !== undefined && typeof code.val !== 'object' ? ` (${code.val})` : '';
  return RETRYABLE_CODES.has(tag)
    ? new RetryableError(`${what}: ${tag}${detail}`)
    : new FatalError(`${what}: ${tag}${detail}`);
}

const dispose = (r) => r?.[Symbol.dispose]?.();

// The request over wasi:http: handed to the host, its body written and
// finished, then the response waited for and read whole.
function wasiTransport({ method, url, what, headers, body, timeoutMs }) {
  let fields;
  try {
    fields = Fields.fromList(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), enc.encode(String(v))]));
  } catch (e) {
    throw new ConfigError(`${what}: a header is not valid (${e?.payload?.tag ?? e.message})`);
  }
  const req = new OutgoingRequest(fields);
  const known = ['get', 'head', 'post', 'put', 'delete', 'connect', 'options', 'trace', 'patch'];
  const m = method.toLowerCase();
  req.setMethod(known.includes(m) ? { tag: m } : { tag: 'other', val: method });
  req.setScheme({ tag: url.protocol === 'https:' ? 'HTTPS' : 'HTTP' });
  req.setAuthority(url.host);
  req.setPathWithQuery(url.pathname + url.search);
  const options = new RequestOptions();
  const ns = BigInt(timeoutMs) * 1_000_000n;
  options.setConnectTimeout(ns);
  options.setFirstByteTimeout(ns);
  options.setBetweenBytesTimeout(ns);
  const outBody = req.body();
  // Handed to the host first: the body streams to the peer as it is written
  // (written first, a body larger than the host's buffer would wait forever).
  let future;
  try {
    future = handle(req, options);
  } catch (e) {
    throw transportError(what, e?.payload ?? e);
  }
  const stream = outBody.write();
  let writeError = null;
  try {
    for (let at = 0; at < body.length; at += 4096) stream.blockingWriteAndFlush(body.subarray(at, at + 4096));
  } catch (e) {
    // A refused request closes the body: the response says why.
    writeError = e;
  } finally {
    dispose(stream);
  }
  if (writeError === null) OutgoingBody.finish(outBody, undefined);
  else dispose(outBody);
  const ready = future.subscribe();
  ready.block();
  dispose(ready);
  const outcome = future.get();
  dispose(future);
  if (!outcome || outcome.tag !== 'ok') throw new RetryableError(`${what}: the response was lost`);
  if (outcome.val.tag !== 'ok') throw transportError(what, outcome.val.val);
  if (writeError !== null) {
    throw new RetryableError(`${what}: writing the body failed (${writeError?.payload?.tag ?? writeError.message})`);
  }
  const res = outcome.val.val;
  const status = res.status();
  const got = {};
  const h = res.headers();
  for (const [k, v] of h.entries()) got[k] = dec.decode(v);
  dispose(h);
  const incoming = res.consume();
  const input = incoming.stream();
  const parts = [];
  let size = 0;
  try {
    for (;;) {
      let chunk;
      try {
        chunk = input.blockingRead(65536n);
      } catch (e) {
        if (e?.payload?.tag === 'closed') break;
        throw new RetryableError(`${what}: reading the response failed (${e?.payload?.tag ?? e.message})`);
      }
      size += chunk.length;
      if (size > MAX_BODY) throw new FatalError(`${what}: the response body is over ${MAX_BODY} bytes`);
      parts.push(chunk);
    }
  } finally {
    dispose(input);
    dispose(incoming);
    dispose(res);
  }
  const all = new Uint8Array(size);
  let at = 0;
  for (const p of parts) { all.set(p, at); at += p.length; }
  return { status, headers: got, body: all };
}

let transport = wasiTransport;

/** Tests in Node replace the network (testing.js `mockHttp`). */
export function setTransport(t) { transport = t ?? wasiTransport; }

/**
 * One request, waited for. `options`: `method` ('GET'), `headers` (an object),
 * `body` (a string or Uint8Array), `bearer` (a token sent as
 * `authorization: Bearer ...`), `timeoutMs` (connect, first byte and between
 * bytes; 30000). Returns a `Response` whatever its status.
 */
export function request(url, options = {}) {
  const method = options.method ?? 'GET';
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    throw new ConfigError(`${method} ${String(url).split('?')[0]}: not a URL`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new ConfigError(`${method} ${parsed.protocol}//${parsed.host}: only http and https`);
  }
  const what = describe(method, parsed);
  const headers = { ...(options.headers ?? {}) };
  if (options.bearer) headers.authorization = `Bearer ${options.bearer}`;
  const body = options.body === undefined ? new Uint8Array(0)
    : typeof options.body === 'string' ? enc.encode(options.body) : options.body;
  // A known length (not chunked): every HTTP/1.1 server reads it.
  headers['content-length'] = String(body.length);
  const timeoutMs = options.timeoutMs ?? 30000;
  if (!(Number.isInteger(timeoutMs) && timeoutMs >= 1 && timeoutMs <= 600_000)) {
    throw new ConfigError(`${what}: timeoutMs is ${timeoutMs}; it must be a whole number of milliseconds from 1 to 600000`);
  }
  let r;
  try {
    r = transport({ method, url: parsed, what, headers, body, timeoutMs });
  } catch (e) {
    // A test double's wasi:http error code (testing.js `mockHttp`).
    if (e && e.transport) throw transportError(what, e.transport);
    throw e;
  }
  return new Response(what, r.status, r.headers, r.body);
}

/** `request` with method POST, then `check()`: a 2xx response, or the thrown error. */
export function post(url, body, options = {}) {
  return request(url, { ...options, method: 'POST', body }).check();
}
