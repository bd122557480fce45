// Types of src/testing.js: batches in the contract's shape and a harness that
// drives a plugin's exports as the host does, in Node.
import type { TableSchema, TableBatch, DdlEvent, ColumnType, Error as Variant } from 'sluice:plugin/types@0.2.0';
import type { Value } from './index.js';

/** A table schema: `columns` are `[name, type, key]`. */
export function schema(
  tableId: number,
  schemaName: string,
  tableName: string,
  columns: ReadonlyArray<readonly [string, ColumnType, boolean?]>,
): TableSchema;

/** Rows of one table in the contract's column shape. */
export class TableBatchBuilder {
  constructor(schema: TableSchema);
  insert(commitTs: number | bigint, after: Value[], flags?: number): this;
  update(commitTs: number | bigint, before: Value[], after: Value[], flags?: number): this;
  delete(commitTs: number | bigint, before: Value[], flags?: number): this;
  finish(): TableBatch;
}

type SinkExports = typeof import('sluice:plugin/sink-api@0.2.0');

/** Drives a sink's `sinkApi` as the host does; each call returns null or the error variant. */
export class SinkHarness {
  constructor(sinkApi: SinkExports, config?: Record<string, unknown>);
  readonly openError: Variant | null;
  write(schemas: TableSchema[], tables: TableBatch[]): Variant | null;
  flush(ts: number | bigint): Variant | null;
  applyDdl(ddl: DdlEvent): Variant | null;
  close(): Variant | null;
}

/** The stub host's counters (`host.counterAdd`) by name. */
export function counters(): Record<string, bigint>;
/** The stub host's gauges (`host.gaugeSet`) by name. */
export function gauges(): Record<string, number>;
/** Clear counters and gauges; set what `host.changefeed()` and `host.savedCheckpoint()` return. */
export function reset(changefeedName?: string, checkpoint?: bigint): void;

/** A request as a test's `mockHttp` sees it. */
export interface MockRequest {
  method: string;
  url: URL;
  headers: Record<string, string>;
  body: Uint8Array;
}

/** Answer the plugin's HTTP requests (src/http.js) in Node tests; `null` removes the mock. */
export function mockHttp(
  respond: ((request: MockRequest) => { status: number; headers?: Record<string, string>; body?: string | Uint8Array }) | null,
): void;
