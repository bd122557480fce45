// The row reader and the error mapping, in Node: `npm test` (bin/test.mjs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sink, host, checkKeys, FatalError, FLAG_REPLAY } from '../src/index.js';
import { schema, TableBatchBuilder, SinkHarness, counters, reset } from '../src/testing.js';

const every = schema(1, 'db', 'all', [
  ['id', 'int', true], ['u', 'uint'], ['f', 'float'], ['d', 'decimal'], ['t', 'text'],
  ['b', 'blob'], ['dt', 'datetime'], ['day', 'date'], ['j', 'json'], ['ok', 'boolean'],
]);

// A sink that keeps every row it reads.
function collector(seen) {
  return sink({
    validate(config) { checkKeys(config, ['fail']); },
    open(config) {
      return {
        write(tables) {
          for (const t of tables) {
            for (const row of t.rows()) {
              if (config.fail) throw new FatalError(`told to fail at ${row.after?.id}`);
              seen.push({ table: t.schema.tableName, op: row.op, ts: row.commitTs, replay: row.replay,
                before: row.before, after: row.after, first: row.value(0) });
            }
          }
        },
        flush() {},
      };
    },
  });
}

test('every column type reads back as its JavaScript value', () => {
  const seen = [];
  const h = new SinkHarness(collector(seen));
  assert.equal(h.openError, null);
  const b = new TableBatchBuilder(every);
  const big = 2n ** 62n;
  b.insert(100, [-5, 7, 1.5, '-12.50', 'héllo ✓', new Uint8Array([0, 255]), 1_700_000_000_000_000, 19000, '{"a":1}', true]);
  b.insert(101, [-(2 ** 40), big, null, null, 'ascii', null, -86_400_000_000, -1, null, false]);
  b.update(102, [1, 1, 0, '0', 'old', new Uint8Array(0), 0, 0, 'null', false], [1, 2, 0, '0', 'new', new Uint8Array(0), 0, 0, 'null', true]);
  b.delete(103, [2, 0, 0, '0', 'gone', new Uint8Array(0), 0, 0, 'null', false], FLAG_REPLAY);
  assert.equal(h.write([every], [b.finish()]), null);
  assert.equal(seen.length, 4);
  const [a, n, up, del] = seen;
  assert.deepEqual(a.after, { id: -5, u: 7, f: 1.5, d: '-12.50', t: 'héllo ✓', b: new Uint8Array([0, 255]),
    dt: 1_700_000_000_000_000, day: 19000, j: '{"a":1}', ok: true });
  assert.equal(a.before, null);
  assert.equal(a.ts, 100n);
  assert.deepEqual(n.after, { id: -(2 ** 40), u: big, f: null, d: null, t: 'ascii', b: null,
    dt: -86_400_000_000, day: -1, j: null, ok: false });
  assert.equal(typeof n.after.u, 'bigint');
  assert.equal(up.op, 'update');
  assert.equal(up.before.t, 'old');
  assert.equal(up.after.t, 'new');
  assert.equal(up.after.ok, true);
  assert.equal(del.op, 'delete');
  assert.equal(del.after, null);
  assert.equal(del.before.t, 'gone');
  assert.equal(del.replay, true);
  assert.equal(del.first, 2);
});

test('errors reach the host as the contract variants, messages kept', () => {
  const h = new SinkHarness(collector([]), { fail: true });
  assert.equal(h.openError, null);
  const b = new TableBatchBuilder(every);
  b.insert(1, [9, 0, 0, '0', '', new Uint8Array(0), 0, 0, 'null', false]);
  assert.deepEqual(h.write([every], [b.finish()]), { tag: 'fatal', val: 'told to fail at 9' });
  const bad = new SinkHarness(collector([]), { nope: 1 });
  assert.equal(bad.openError.tag, 'config');
  assert.match(bad.openError.val, /unknown option `nope`/);
  // Anything else thrown is retryable, its name and message kept.
  const broken = new SinkHarness(sink({ open() { return { write() { null.x; }, flush() {} }; } }));
  const err = broken.write([every], []);
  assert.equal(err.tag, 'retryable');
  assert.match(err.val, /^TypeError: /);
});

test('counters land in the host stub', () => {
  reset();
  const h = new SinkHarness(sink({ open() { return { write() {}, flush(ts) { host.counterAdd('flushed', ts); } }; } }));
  assert.equal(h.flush(5), null);
  assert.equal(h.flush(7), null);
  assert.deepEqual(counters(), { flushed: 12n });
});

test('a column reads as one array per image, without a row object', () => {
  let got = null;
  const h = new SinkHarness(sink({
    open() {
      return {
        write(tables) {
          for (const t of tables) {
            got = {
              ids: t.column(0), texts: t.column(4), before: t.column(0, 'before'), oks: t.column(9),
            };
            assert.throws(() => t.column(10), RangeError);
            assert.throws(() => t.column(0, 'middle'), TypeError);
          }
        },
        flush() {},
      };
    },
  }));
  const b = new TableBatchBuilder(every);
  b.insert(1, [1, 0, 0, '0', 'a', new Uint8Array(0), 0, 0, 'null', true]);
  b.update(2, [1, 0, 0, '0', 'a', null, 0, 0, null, true], [1, 0, 0, '0', null, null, 0, 0, null, false]);
  b.delete(3, [2, 0, 0, '0', 'ü', null, 0, 0, null, null]);
  assert.equal(h.write([every], [b.finish()]), null);
  assert.deepEqual(got, { ids: [1, 1], texts: ['a', null], before: [1, 2], oks: [true, false] });
});
