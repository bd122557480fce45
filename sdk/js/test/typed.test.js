// Runs test/typed-sink.ts (bundled by esbuild, as bin/build.mjs does for a
// TypeScript plugin) through the harness.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sinkApi } from './typed-sink.ts';
import { schema, TableBatchBuilder, SinkHarness, counters, gauges, reset } from '../src/testing.js';

const t = schema(7, 'db', 'pay', [['id', 'int', true], ['amount', 'float'], ['note', 'text']]);

test('a TypeScript sink counts and sums what it reads', () => {
  reset();
  const h = new SinkHarness(sinkApi, { table: 'pay' });
  assert.equal(h.openError, null);
  const b = new TableBatchBuilder(t)
    .insert(10, [1, 2.5, 'a'])
    .update(11, [1, 2.5, 'a'], [1, 4, 'b'])
    .delete(12, [2, 10, null]);
  assert.equal(h.write([t], [b.finish()]), null);
  assert.equal(h.flush(12), null);
  assert.deepEqual(counters(), { rows: 3n, ddls: 0n });
  // insert 1+2.5, update's after 1+4, delete's before 2+10
  assert.equal(gauges().sum, 20.5);
});

test('a TypeScript sink refuses a wrong option with a config error', () => {
  const h = new SinkHarness(sinkApi, { table: 3 });
  assert.deepEqual(h.openError, { tag: 'config', val: 'table must be a string' });
  const unknown = new SinkHarness(sinkApi, { tabel: 'x' });
  assert.equal(unknown.openError.tag, 'config');
  assert.match(unknown.openError.val, /unknown option `tabel`/);
});
