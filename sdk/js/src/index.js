// @sluice/sdk: write Sluice plugins in JavaScript.
//
// A plugin is a module whose default export is `sink({...})` or `filter({...})`
// (see README.md). The SDK turns the contract's column batches into rows,
// keeps the schemas the host sends once per instance, and turns thrown errors
// into the contract's error variants with their messages.

import * as host from 'sluice:plugin/host@0.2.0';

export { host };

/** A thrown error that tells the host what to do next. */
export class SluiceError extends Error {
  constructor(kind, message) {
    super(message);
    this.name = 'SluiceError';
    this.kind = kind;
  }
}
/** The options are wrong: the changefeed is refused or failed at once. */
export class ConfigError extends SluiceError {
  constructor(message) { super('config', message); }
}
/** A transient failure: the host backs off and delivers the rows again. */
export class RetryableError extends SluiceError {
  constructor(message) { super('retryable', message); }
}
/** Retrying will not help: the changefeed is failed. */
export class FatalError extends SluiceError {
  constructor(message) { super('fatal', message); }
}

// The shape componentize-js throws for `result<_, error>`: an error whose
// `payload` is the variant. Anything else thrown is retryable, with its message
// (the host would otherwise see only a trap).
function toContract(e) {
  if (e && e.payload && typeof e.payload.tag === 'string') return e;
  const kind = e instanceof SluiceError ? e.kind : 'retryable';
  const message = e instanceof SluiceError
    ? e.message
    : `${(e && e.name) || 'Error'}: ${(e && e.message) || String(e)}`;
  const out = new Error(message);
  out.payload = { tag: kind, val: message };
  return out;
}

function guarded(f) {
  return (...args) => {
    try {
      return f(...args);
    } catch (e) {
      throw toContract(e);
    }
  };
}

function parseConfig(text) {
  try {
    const value = JSON.parse(text && text.trim() ? text : '{}');
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      throw new Error('the options must be a table');
    }
    return value;
  } catch (e) {
    throw new ConfigError(`invalid plugin config: ${e.message}`);
  }
}

/**
 * Refuse options not in `known` (a misspelt key must not be ignored).
 * @param {object} config
 * @param {string[]} known
 */
export function checkKeys(config, known) {
  for (const key of Object.keys(config)) {
    if (!known.includes(key)) {
      throw new ConfigError(`unknown option \`${key}\`; expected one of ${known.map((k) => `\`${k}\``).join(', ') || 'none'}`);
    }
  }
}

const OPS = ['insert', 'update', 'delete'];
export const FLAG_REPLAY = 1;
export const FLAG_SPLIT = 2;

const utf8 = new TextDecoder('utf-8');
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const MIN_SAFE = -MAX_SAFE;

// A bigint as a number when a double holds it exactly.
function num(v) {
  return v <= MAX_SAFE && v >= MIN_SAFE ? Number(v) : v;
}

function isAscii(bytes) {
  for (let i = 0; i < bytes.length; i++) if (bytes[i] > 0x7f) return false;
  return true;
}

// One column of one image, decoded once: every value as JS, or null.
function decodeColumn(column, data) {
  const nulls = data.nulls;
  const isNull = (i) => nulls.length > 0 && (nulls[i >> 3] & (1 << (i & 7))) !== 0;
  const v = data.values;
  let values;
  switch (v.tag) {
    case 'int64':
    case 'uint64':
      values = Array.from(v.val, column.ty === 'boolean' ? (x) => x !== 0n : num);
      break;
    case 'float64':
      values = Array.from(v.val);
      break;
    case 'bytes': {
      const { offsets, data: bytes } = v.val;
      const n = offsets.length - 1;
      values = new Array(Math.max(n, 0));
      if (column.ty === 'blob') {
        for (let i = 0; i < n; i++) values[i] = bytes.subarray(offsets[i], offsets[i + 1]);
      } else if (isAscii(bytes)) {
        // One decode for the whole column: byte offsets are character offsets.
        const text = utf8.decode(bytes);
        for (let i = 0; i < n; i++) values[i] = text.slice(offsets[i], offsets[i + 1]);
      } else {
        for (let i = 0; i < n; i++) values[i] = utf8.decode(bytes.subarray(offsets[i], offsets[i + 1]));
      }
      break;
    }
    default:
      throw new FatalError(`unknown value carrier ${v.tag}`);
  }
  if (nulls.length > 0) {
    for (let i = 0; i < values.length; i++) if (isNull(i)) values[i] = null;
  }
  return values;
}

/** The rows of one table batch. */
export class TableView {
  constructor(schema, batch) {
    this.schema = schema;
    this.batch = batch;
    this._after = null;
    this._before = null;
  }
  /** Rows in the batch. */
  get length() { return this.batch.ops.length; }
  _image(which) {
    const key = which === 'after' ? '_after' : '_before';
    if (this[key] === null) {
      this[key] = this.batch[which].map((d, c) => decodeColumn(this.schema.columns[c], d));
    }
    return this[key];
  }
  /** Each row: `{ op, commitTs, txnId, seq, replay, flags, before, after }`;
   * images are objects from column name to value (null for NULL). */
  *rows() {
    const b = this.batch;
    const names = this.schema.columns.map((c) => c.name);
    const after = b.after.length ? this._image('after') : [];
    const before = b.before.length ? this._image('before') : [];
    let a = 0;
    let o = 0;
    for (let i = 0; i < b.ops.length; i++) {
      const op = OPS[b.ops[i]];
      const image = (cols, at) => {
        const row = {};
        for (let c = 0; c < names.length; c++) row[names[c]] = cols[c][at];
        return row;
      };
      const row = {
        op,
        commitTs: b.commitTs[i],
        txnId: b.txnId[i],
        seq: b.rowSeq[i],
        flags: b.rowFlags[i],
        replay: (b.rowFlags[i] & FLAG_REPLAY) !== 0,
        before: op === 'insert' ? null : image(before, o++),
        after: op === 'delete' ? null : image(after, a++),
      };
      yield row;
    }
  }
}

// Schemas by `${tableId}/${version}`, as the host sent them to this instance.
const schemas = new Map();

function remember(batch) {
  for (const s of batch.schemas) schemas.set(`${s.tableId}/${s.version}`, s);
}

/** The schema of a table batch. */
export function schemaOf(table) {
  const s = schemas.get(`${table.tableId}/${table.schemaVersion}`);
  if (!s) throw new FatalError(`no schema for table ${table.tableId} version ${table.schemaVersion}`);
  return s;
}

/** Each table batch of a batch as a `TableView`. */
export function* tables(batch) {
  for (const t of batch.tables) yield new TableView(schemaOf(t), t);
}

/**
 * The `sinkApi` export of a sink. `impl` has `open(config)` returning the sink
 * state object with `write(tables)`, `flush(ts)` and optionally `applyDdl(ddl)`
 * and `close()`; and optionally `validate(config)`. `config` is the parsed
 * options; `tables` iterates `TableView`s.
 */
export function sink(impl) {
  let state = null;
  const need = () => {
    if (!state) throw new FatalError('the host called the sink before open');
    return state;
  };
  return {
    validateConfig: guarded((text) => { impl.validate?.(parseConfig(text)); }),
    open: guarded((text) => {
      const config = parseConfig(text);
      impl.validate?.(config);
      state = impl.open(config);
    }),
    write: guarded((batch) => {
      remember(batch);
      need().write(tables(batch));
    }),
    flush: guarded((ts) => { need().flush(ts); }),
    applyDdl: guarded((ddl) => { need().applyDdl?.(ddl); }),
    close: guarded(() => {
      const s = state;
      state = null;
      s?.close?.();
    }),
  };
}

/**
 * The `filterApi` export of a filter. `impl.open(config)` returns an object
 * with `transform(tables)` that returns the raw table batches to pass on
 * (`view.batch`, possibly edited; drop a table by leaving it out).
 */
export function filter(impl) {
  let state = null;
  return {
    validateConfig: guarded((text) => { impl.validate?.(parseConfig(text)); }),
    open: guarded((text) => {
      const config = parseConfig(text);
      impl.validate?.(config);
      state = impl.open(config);
    }),
    transform: guarded((batch) => {
      if (!state) throw new FatalError('the host called the filter before open');
      remember(batch);
      return { schemas: [], tables: state.transform(tables(batch)) };
    }),
  };
}
