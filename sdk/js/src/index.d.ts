// Types of @sluice/sdk (src/index.js). The contract's own types (batches,
// schemas, the host interface) are generated from wit/plugin.wit into
// ../types by bin/types.mjs.
/// <reference path="../types/sink.d.ts" />
/// <reference path="../types/filter.d.ts" />
import type { TableSchema, TableBatch, DdlEvent, Column } from 'sluice:plugin/types@0.2.0';
import * as host from 'sluice:plugin/host@0.2.0';

export { host };
export type { TableSchema, TableBatch, DdlEvent, Column };

/** A thrown error that tells the host what to do next. */
export class SluiceError extends Error {
  constructor(kind: 'config' | 'retryable' | 'fatal', message: string);
  readonly kind: 'config' | 'retryable' | 'fatal';
}
/** The options are wrong: the changefeed is refused or failed at once. */
export class ConfigError extends SluiceError {
  constructor(message: string);
}
/** A transient failure: the host backs off and delivers the rows again. */
export class RetryableError extends SluiceError {
  constructor(message: string);
}
/** Retrying will not help: the changefeed is failed. */
export class FatalError extends SluiceError {
  constructor(message: string);
}

/** The parsed `[sink.config]` / `[filter.config]` table. */
export type Config = Record<string, unknown>;

/** Refuse options not in `known` (a misspelt key must not be ignored). */
export function checkKeys(config: object, known: readonly string[]): void;

export const FLAG_REPLAY: 1;
export const FLAG_SPLIT: 2;

/**
 * One value as JavaScript: int/uint/float/datetime/date a number (a bigint
 * only when it does not fit a double exactly), decimal/text/json a string,
 * blob a Uint8Array (a view into the batch), boolean true/false, NULL null.
 */
export type Value = number | bigint | string | Uint8Array | boolean | null;

/** An image: column name to value. */
export type Image = Record<string, Value>;

/** One row change. */
export class Row {
  /** The row's place in its table batch. */
  readonly index: number;
  readonly op: 'insert' | 'update' | 'delete';
  /** The transaction's commit ts. */
  readonly commitTs: bigint;
  /** The transaction's identity, the same each time it is delivered. */
  readonly txnId: bigint;
  /** The row's place among its transaction's changes. */
  readonly seq: number;
  /** `FLAG_REPLAY`, `FLAG_SPLIT`, ... */
  readonly flags: number;
  /** Delivered again after a restart, retry or swap. */
  readonly replay: boolean;
  /** The image before the change (updates and deletes), else null. */
  readonly before: Image | null;
  /** The image after the change (inserts and updates), else null. */
  readonly after: Image | null;
  /** Value of column `c` of the after image (the before image for a delete). */
  value(c: number): Value;
}

/** The rows of one table batch. */
export class TableView {
  constructor(schema: TableSchema, batch: TableBatch);
  readonly schema: TableSchema;
  /** The raw column batch, as the contract carries it. */
  readonly batch: TableBatch;
  /** Rows in the batch. */
  readonly length: number;
  /** Each row in batch order. */
  rows(): IterableIterator<Row>;
  /** Every value of column `c` of one image, decoded once per batch (the
   * image's values for the rows that have it, in batch order). */
  column(c: number, image?: 'after' | 'before'): readonly Value[];
}

/** The schema of a table batch, as the host sent it to this instance. */
export function schemaOf(table: TableBatch): TableSchema;

/** A sink instance's state, returned by `open`. */
export interface SinkInstance {
  /** The rows of one batch, table by table. Throw to refuse it. */
  write(tables: Iterable<TableView>): void;
  /** Make every row written so far durable, then return: that acknowledges them. */
  flush(ts: bigint): void;
  applyDdl?(ddl: DdlEvent): void;
  close?(): void;
}

export interface SinkImpl<C extends object = Config> {
  /** Check the options; throw ConfigError to refuse them. */
  validate?(config: C): void;
  open(config: C): SinkInstance;
}

/** The `sinkApi` export of a sink. */
export function sink<C extends object = Config>(impl: SinkImpl<C>): typeof import('sluice:plugin/sink-api@0.2.0');

export interface FilterInstance {
  /** The table batches to pass on (`view.batch`, possibly edited; drop a table by leaving it out). */
  transform(tables: Iterable<TableView>): TableBatch[];
}

export interface FilterImpl<C extends object = Config> {
  validate?(config: C): void;
  open(config: C): FilterInstance;
}

/** The `filterApi` export of a filter. */
export function filter<C extends object = Config>(impl: FilterImpl<C>): typeof import('sluice:plugin/filter-api@0.2.0');
