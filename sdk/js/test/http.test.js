// src/http.js through the example webhook sink, with the network mocked
// (testing.js mockHttp): what is sent, and how each failure maps to the
// contract's errors.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sinkApi } from '../../../examples/sink-js-webhook/sink.js';
import { request } from '../src/http.js';
import { schema, TableBatchBuilder, SinkHarness, mockHttp, reset } from '../src/testing.js';

const t = schema(3, 'shop', 'users', [['id', 'int', true], ['name', 'text'], ['big', 'uint']]);
const batch = () => new TableBatchBuilder(t)
  .insert(10, [1, 'ann', 2n ** 63n])
  .update(11, [1, 'ann', 0], [1, 'bo', 0], 1)
  .finish();

test('a batch is posted as JSON with its ids, replay flags and bearer token', () => {
  reset('acme/feed');
  const seen = [];
  mockHttp((req) => { seen.push(req); return { status: 204 }; });
  const h = new SinkHarness(sinkApi, { url: 'http://hooks.test:8080/in?key=secret', 'bearer-token': 'tok' });
  assert.equal(h.openError, null);
  assert.equal(h.write([t], [batch()]), null);
  assert.equal(seen.length, 1);
  const [req] = seen;
  assert.equal(req.method, 'POST');
  assert.equal(req.url.href, 'http://hooks.test:8080/in?key=secret');
  assert.equal(req.headers.authorization, 'Bearer tok');
  const body = JSON.parse(new TextDecoder().decode(req.body));
  assert.deepEqual(body.events.map((e) => [e.id, e.op, e.replay]), [
    ['acme/feed/shop.users/10/0', 'insert', false],
    ['acme/feed/shop.users/11/1', 'update', true],
  ]);
  assert.deepEqual(body.events[0].after, { id: 1, name: 'ann', big: '9223372036854775808' });
  mockHttp(null);
});

test('statuses and transport failures become the contract errors, URLs without queries', () => {
  const cases = [
    [() => ({ status: 503, body: 'busy' }), 'retryable', 'POST http://hooks.test:8080/in: status 503: busy'],
    [() => ({ status: 429 }), 'retryable', 'POST http://hooks.test:8080/in: status 429'],
    [() => ({ status: 400 }), 'fatal', 'POST http://hooks.test:8080/in: status 400'],
    [() => { throw { payload: { tag: 'HTTP-request-denied' } }; }, 'config',
      'POST http://hooks.test:8080/in: the host denied the request: grant the host in `capabilities.http`'],
    [() => { throw { payload: { tag: 'connection-refused' } }; }, 'retryable', 'POST http://hooks.test:8080/in: connection-refused'],
  ];
  for (const [respond, tag, val] of cases) {
    mockHttp(respond);
    const h = new SinkHarness(sinkApi, { url: 'http://hooks.test:8080/in?key=secret' });
    assert.deepEqual(h.write([t], [batch()]), { tag, val });
  }
  mockHttp(null);
  assert.throws(() => request('ftp://x/y'), /only http and https/);
  assert.throws(() => request('not a url'), /not a URL/);
  for (const timeoutMs of [0, -1, 1.5, 1e20, NaN]) {
    assert.throws(() => request('http://x/', { timeoutMs }), /timeoutMs is .*from 1 to 600000/);
  }
});
