// Test plugins in Node, without WebAssembly: build batches in the contract's
// shape and drive a plugin's exports as the host does (schemas sent once per
// instance). Run test files with `node sdk/js/bin/test.mjs FILE.test.js`.
export { counters, gauges, reset } from 'sluice:plugin/host@0.2.0';
import { setTransport } from './http.js';

/**
 * Answer the plugin's HTTP requests (src/http.js) with `respond(request)`,
 * where `request` is `{ method, url, headers, body }` (`url` a URL, `body`
 * bytes) and the answer `{ status, headers?, body? }` (a string or bytes).
 * Throwing `{ payload: { tag: 'HTTP-request-denied' } }` or another
 * wasi:http error code acts as the host would. `mockHttp(null)` removes it.
 */
export function mockHttp(respond) {
  if (!respond) { setTransport(null); return; }
  setTransport((req) => {
    let answer;
    try {
      answer = respond({ method: req.method, url: req.url, headers: req.headers, body: req.body });
    } catch (e) {
      if (e && e.payload && typeof e.payload.tag === 'string') {
        const err = new Error(e.payload.tag);
        err.transport = e.payload;
        throw err;
      }
      throw e;
    }
    const body = answer.body === undefined ? new Uint8Array(0)
      : typeof answer.body === 'string' ? new TextEncoder().encode(answer.body) : answer.body;
    return { status: answer.status, headers: answer.headers ?? {}, body };
  });
}

const CARRIER = {
  int: 'int64', uint: 'uint64', float: 'float64', decimal: 'bytes', text: 'bytes',
  blob: 'bytes', datetime: 'int64', date: 'int64', json: 'bytes', boolean: 'int64',
};

/** A table schema: `columns` are `[name, type, key]` (type: 'int', 'text', ...). */
export function schema(tableId, schemaName, tableName, columns) {
  return {
    tableId,
    version: 1,
    schemaName,
    tableName,
    columns: columns.map(([name, ty, key]) => ({ name, ty, sqlType: '', nullable: !key, key: !!key })),
  };
}

class ImageBuilder {
  constructor(columns) {
    this.columns = columns;
    this.values = columns.map(() => []);
  }
  push(row) {
    if (row.length !== this.columns.length) throw new Error(`an image has ${this.columns.length} values, got ${row.length}`);
    row.forEach((v, c) => this.values[c].push(v));
  }
  finish() {
    const enc = new TextEncoder();
    return this.columns.map((col, c) => {
      const vals = this.values[c];
      const nulls = vals.some((v) => v === null) ? new Uint8Array(Math.ceil(vals.length / 8)) : new Uint8Array(0);
      vals.forEach((v, i) => { if (v === null) nulls[i >> 3] |= 1 << (i & 7); });
      const tag = CARRIER[col.ty];
      let val;
      if (tag === 'int64') val = BigInt64Array.from(vals, (v) => BigInt(v === null ? 0 : v === true ? 1 : v === false ? 0 : v));
      else if (tag === 'uint64') val = BigUint64Array.from(vals, (v) => BigInt(v ?? 0));
      else if (tag === 'float64') val = Float64Array.from(vals, (v) => v ?? 0);
      else {
        const parts = vals.map((v) => (v === null ? new Uint8Array(0) : typeof v === 'string' ? enc.encode(v) : v));
        const offsets = new Uint32Array(parts.length + 1);
        parts.forEach((p, i) => { offsets[i + 1] = offsets[i] + p.length; });
        const data = new Uint8Array(offsets[parts.length]);
        parts.forEach((p, i) => data.set(p, offsets[i]));
        val = { offsets, data };
      }
      return { values: { tag, val }, nulls };
    });
  }
}

/** Rows of one table in the contract's column shape. */
export class TableBatchBuilder {
  constructor(schema) {
    this.schema = schema;
    this.ops = [];
    this.ts = [];
    this.flags = [];
    this.before = new ImageBuilder(schema.columns);
    this.after = new ImageBuilder(schema.columns);
  }
  _row(op, ts, flags) { this.ops.push(op); this.ts.push(BigInt(ts)); this.flags.push(flags); return this; }
  insert(commitTs, after, flags = 0) { this.after.push(after); return this._row(0, commitTs, flags); }
  update(commitTs, before, after, flags = 0) { this.before.push(before); this.after.push(after); return this._row(1, commitTs, flags); }
  delete(commitTs, before, flags = 0) { this.before.push(before); return this._row(2, commitTs, flags); }
  finish() {
    const n = this.ops.length;
    return {
      tableId: this.schema.tableId,
      schemaVersion: this.schema.version,
      ops: Uint8Array.from(this.ops),
      commitTs: BigUint64Array.from(this.ts),
      txnId: BigUint64Array.from(this.ts),
      rowFlags: Uint8Array.from(this.flags),
      rowSeq: Uint32Array.from({ length: n }, (_, i) => i),
      before: this.before.finish(),
      after: this.after.finish(),
    };
  }
}

// The error variant an export threw, as `{ tag, val }`, or rethrows a trap.
function variant(f) {
  try {
    f();
    return null;
  } catch (e) {
    if (e && e.payload) return e.payload;
    throw e;
  }
}

/** Drives a sink's `sinkApi` as the host does. Each method returns null on
 * success or the error variant (`{ tag: 'retryable', val: '...' }`). */
export class SinkHarness {
  constructor(sinkApi, config = {}) {
    this.api = sinkApi;
    this.sent = new Set();
    const text = JSON.stringify(config);
    this.openError = variant(() => sinkApi.validateConfig(text)) ?? variant(() => sinkApi.open(text));
  }
  write(schemas, tables) {
    const fresh = schemas.filter((s) => !this.sent.has(`${s.tableId}/${s.version}`));
    fresh.forEach((s) => this.sent.add(`${s.tableId}/${s.version}`));
    return variant(() => this.api.write({ schemas: fresh, tables }));
  }
  flush(ts) { return variant(() => this.api.flush(BigInt(ts))); }
  applyDdl(ddl) { return variant(() => this.api.applyDdl(ddl)); }
  close() { return variant(() => this.api.close()); }
}
