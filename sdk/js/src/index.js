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
// 64-bit integers as numbers where a double holds them exactly (BigInts
// otherwise): read as 32-bit halves, without BigInt arithmetic for the
// common case.
function int64s(list, signed) {
  const n = list.length;
  const out = new Array(n);
  const words = new Int32Array(list.buffer, list.byteOffset, n * 2);
  for (let i = 0; i < n; i++) {
    const lo = words[2 * i] >>> 0;
    const hi = words[2 * i + 1];
    if (hi === 0) {
      out[i] = lo;
    } else if (signed ? hi >= -2097152 && hi < 2097152 : hi > 0 && hi < 2097152) {
      out[i] = hi * 4294967296 + lo;
    } else {
      out[i] = list[i];
    }
  }
  return out;
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
      values = int64s(v.val, v.tag === 'int64');
      if (column.ty === 'boolean') values = values.map((x) => x !== 0);
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
      } else {
        // One decode for the whole column; when it is all ASCII (as long in
        // UTF-16 units as in bytes: the host sends valid UTF-8) byte offsets
        // are character offsets.
        const text = utf8.decode(bytes);
        if (text.length === bytes.length) {
          for (let i = 0; i < n; i++) values[i] = text.slice(offsets[i], offsets[i + 1]);
        } else {
          for (let i = 0; i < n; i++) values[i] = utf8.decode(bytes.subarray(offsets[i], offsets[i + 1]));
        }
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
  /** Every value of column `c` (an index into `schema.columns`) of one image
   * (`'after'`, the default, or `'before'`), decoded once per batch: the
   * values of the rows that have that image, in batch order. The fastest way
   * to read a batch: no object per row. */
  column(c, image = 'after') {
    if (image !== 'after' && image !== 'before') throw new TypeError(`image must be 'after' or 'before', not ${image}`);
    if (!(c >= 0 && c < this.schema.columns.length)) throw new RangeError(`no column ${c} in ${this.schema.tableName}`);
    return this.batch[image].length ? this._image(image)[c] : [];
  }
  /** Each row, a `Row`, in batch order. */
  *rows() {
    const ops = this.batch.ops;
    const after = this.batch.after.length ? this._image('after') : null;
    const before = this.batch.before.length ? this._image('before') : null;
    const names = this.schema.columns.map((c) => c.name);
    let a = 0;
    let o = 0;
    for (let i = 0; i < ops.length; i++) {
      const code = ops[i];
      yield new Row(this.batch, names, i, code, code === 0 ? -1 : o++, code === 2 ? -1 : a++, before, after);
    }
  }
}

function imageOf(names, cols, at) {
  const row = {};
  for (let c = 0; c < names.length; c++) row[names[c]] = cols[c][at];
  return row;
}

/** One row change. Images are objects from column name to value (null for
 * NULL), made when first read. */
export class Row {
  constructor(batch, names, index, code, beforeAt, afterAt, before, after) {
    this._b = batch;
    this._names = names;
    this.index = index;
    this._code = code;
    this._beforeAt = beforeAt;
    this._afterAt = afterAt;
    this._before = before;
    this._after = after;
    this._beforeImage = undefined;
    this._afterImage = undefined;
  }
  /** `'insert'`, `'update'` or `'delete'`. */
  get op() { return OPS[this._code]; }
  /** The transaction's commit ts (a BigInt). */
  get commitTs() { return this._b.commitTs[this.index]; }
  /** The transaction's identity (a BigInt), the same each time it is delivered. */
  get txnId() { return this._b.txnId[this.index]; }
  /** The row's place among its transaction's changes. */
  get seq() { return this._b.rowSeq[this.index]; }
  /** The row's flags (`FLAG_REPLAY`, `FLAG_SPLIT`, ...). */
  get flags() { return this._b.rowFlags[this.index]; }
  /** Delivered again after a restart, retry or swap. */
  get replay() { return (this._b.rowFlags[this.index] & FLAG_REPLAY) !== 0; }
  /** The image before the change (updates and deletes), else null. */
  get before() {
    if (this._beforeAt < 0) return null;
    if (this._beforeImage === undefined) this._beforeImage = imageOf(this._names, this._before, this._beforeAt);
    return this._beforeImage;
  }
  /** The image after the change (inserts and updates), else null. */
  get after() {
    if (this._afterAt < 0) return null;
    if (this._afterImage === undefined) this._afterImage = imageOf(this._names, this._after, this._afterAt);
    return this._afterImage;
  }
  /** Value of column `c` (by index) of the after image, or of the before
   * image for a delete: no object is made. */
  value(c) {
    return this._afterAt >= 0 ? this._after[c][this._afterAt] : this._before[c][this._beforeAt];
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

// `validateConfig` and `open` of either world: options parsed, checked by
// `impl.validate`, then the instance state from `impl.open`.
function configured(impl, setState) {
  return {
    validateConfig: guarded((text) => { impl.validate?.(parseConfig(text)); }),
    open: guarded((text) => {
      const config = parseConfig(text);
      impl.validate?.(config);
      setState(impl.open(config));
    }),
  };
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
    ...configured(impl, (s) => { state = s; }),
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
    ...configured(impl, (s) => { state = s; }),
    transform: guarded((batch) => {
      if (!state) throw new FatalError('the host called the filter before open');
      remember(batch);
      return { schemas: [], tables: state.transform(tables(batch)) };
    }),
  };
}
