// Generated from wit/plugin.wit by sdk/js/bin/types.mjs; do not edit.
declare module 'sluice:plugin/types@0.2.0' {
  /**
   * Logical type of a column, and which `column-values` case carries it.
   * # Variants
   * 
   * ## `"int"`
   * 
   * Signed integer (TINYINT..BIGINT). Carried as `int64`.
   * ## `"uint"`
   * 
   * Unsigned integer (TINYINT UNSIGNED..BIGINT UNSIGNED). Carried as `uint64`.
   * ## `"float"`
   * 
   * FLOAT / DOUBLE. Carried as `float64`.
   * ## `"decimal"`
   * 
   * Exact decimal as its canonical text, e.g. `-1234.50`. Carried as `bytes`.
   * ## `"text"`
   * 
   * UTF-8 text (CHAR, VARCHAR, TEXT, ENUM, SET). Carried as `bytes`.
   * ## `"blob"`
   * 
   * Binary data (BINARY, VARBINARY, BLOB). Carried as `bytes`.
   * ## `"datetime"`
   * 
   * DATETIME / TIMESTAMP as microseconds since 1970-01-01 00:00:00 UTC. Carried as `int64`.
   * ## `"date"`
   * 
   * DATE as days since 1970-01-01. Carried as `int64`.
   * ## `"json"`
   * 
   * JSON document as UTF-8 text. Carried as `bytes`.
   * ## `"boolean"`
   * 
   * BOOLEAN as 0 / 1. Carried as `int64`.
   */
  export type ColumnType = 'int' | 'uint' | 'float' | 'decimal' | 'text' | 'blob' | 'datetime' | 'date' | 'json' | 'boolean';
  /**
   * One column of a table.
   */
  export interface Column {
    name: string,
    ty: ColumnType,
    /**
     * The upstream type as written in its DDL, e.g. `decimal(12,2)`; informational.
     */
    sqlType: string,
    nullable: boolean,
    /**
     * Part of the primary key (or of the unique key the host uses as the row key).
     */
    key: boolean,
  }
  /**
   * The schema of one table at one version. Sent to a plugin instance once per
   * (table-id, version), in the first batch that uses it.
   */
  export interface TableSchema {
    /**
     * Host-assigned id, stable for the life of the changefeed.
     */
    tableId: number,
    /**
     * Increases whenever the table's columns change (DDL).
     */
    version: number,
    /**
     * Upstream database (schema) name.
     */
    schemaName: string,
    tableName: string,
    columns: Array<Column>,
  }
  /**
   * Byte-like values of one column: value `i` is `data[offsets[i]..offsets[i + 1]]`.
   * `offsets` has one more entry than there are values; a NULL value is empty.
   */
  export interface ByteValues {
    offsets: Uint32Array,
    data: Uint8Array,
  }
  /**
   * The values of one column for the rows of one image.
   */
  export type ColumnValues = ColumnValuesInt64 | ColumnValuesUint64 | ColumnValuesFloat64 | ColumnValuesBytes;
  export interface ColumnValuesInt64 {
    tag: 'int64',
    val: BigInt64Array,
  }
  export interface ColumnValuesUint64 {
    tag: 'uint64',
    val: BigUint64Array,
  }
  export interface ColumnValuesFloat64 {
    tag: 'float64',
    val: Float64Array,
  }
  export interface ColumnValuesBytes {
    tag: 'bytes',
    val: ByteValues,
  }
  /**
   * One column of an image. `nulls` is a bitmap (bit `i % 8` of byte `i / 8` set
   * means value `i` is NULL); it is empty when no value is NULL.
   */
  export interface ColumnData {
    values: ColumnValues,
    nulls: Uint8Array,
  }
  /**
   * The rows of one table, in commit-ts order.
   * 
   * Per row `i`: `ops[i]` is 0 insert, 1 update, 2 delete; `commit-ts[i]` its
   * transaction's commit ts; `txn-id[i]` its transaction's identity, the same each
   * time the transaction is delivered (a source whose commit ts follow the clock
   * may give a transaction delivered again another commit ts; its id stays) and
   * different for different transactions; `row-flags[i]` bit 0 = replay (delivered again after a
   * restart, swap or retry: write idempotently), bit 1 = split (the upstream
   * transaction did not fit one batch), bit 2 = no foreign key checks (the
   * upstream statement ran with `foreign_key_checks = 0`, so it neither checked
   * nor cascaded foreign keys); `row-seq[i]` the row's place among its
   * transaction's row changes over every table, from 0: rows of one transaction
   * in different tables were made upstream in `row-seq` order (a sink that
   * applies foreign keys replays them in it). A source that knows no order across
   * tables numbers each table's rows from 0.
   * 
   * Images are dense: `after` holds one value per column for every row that is an
   * insert or update, in row order; `before` for every update or delete. Both have
   * one `column-data` per schema column, in schema order.
   */
  export interface TableBatch {
    tableId: number,
    schemaVersion: number,
    ops: Uint8Array,
    commitTs: BigUint64Array,
    txnId: BigUint64Array,
    rowFlags: Uint8Array,
    rowSeq: Uint32Array,
    before: Array<ColumnData>,
    after: Array<ColumnData>,
  }
  /**
   * What one `write` (or `transform`) call carries.
   */
  export interface Batch {
    /**
     * Schemas this instance has not seen yet; later batches refer to them by
     * (table-id, version). A new instance is sent every schema again.
     */
    schemas: Array<TableSchema>,
    tables: Array<TableBatch>,
  }
  /**
   * A table (or view, or sequence) by its upstream names.
   */
  export interface QualifiedName {
    schemaName: string,
    tableName: string,
  }
  /**
   * A schema change, delivered after every row below its commit ts of the tables
   * it names was flushed; their rows above it wait until `apply-ddl` returns.
   */
  export interface DdlEvent {
    commitTs: bigint,
    /**
     * Its identity: the same each time it is delivered (its commit ts may
     * not be), as the rows' `txn-id`.
     */
    txnId: bigint,
    /**
     * What the statement does, as event filters name it: `create table`,
     * `alter table`, `rename table`, `create view`, `create sequence`, ...
     * (docs/sources/mysql.md lists every kind).
     */
    kind: string,
    /**
     * The database it changes: its first table's, or the database a database
     * statement names.
     */
    schemaName: string,
    /**
     * The table it changes when it names exactly one; empty otherwise.
     */
    tableName: string,
    /**
     * Every table, view or sequence the statement names, in the order written;
     * a rename lists each old name, then its new name. Empty for a statement
     * about a database (it affects every table of `schema-name`).
     */
    tables: Array<QualifiedName>,
    /**
     * The session's current database when the statement ran upstream: what its
     * unqualified names refer to (empty: none was selected).
     */
    defaultSchema: string,
    /**
     * The session settings the statement ran under upstream, as (variable,
     * value) in the upstream's own terms; for MySQL and MariaDB the system
     * variables `sql_mode`, `foreign_key_checks`, `unique_checks`,
     * `time_zone`, `character_set_client`, `collation_connection`,
     * `collation_server`, ..., which `SET SESSION variable = 'value'` restores
     * before the statement is replayed.
     */
    session: Array<[string, string]>,
    /**
     * The statement as executed upstream (converted to UTF-8).
     */
    query: string,
  }
  /**
   * Typed errors: what the host does next.
   */
  export type Error = ErrorConfig | ErrorRetryable | ErrorFatal;
  /**
   * The configuration is wrong; the changefeed is rejected or failed at once.
   */
  export interface ErrorConfig {
    tag: 'config',
    val: string,
  }
  /**
   * A transient failure; the host backs off and retries from the checkpoint.
   */
  export interface ErrorRetryable {
    tag: 'retryable',
    val: string,
  }
  /**
   * Retrying will not help; the changefeed is failed.
   */
  export interface ErrorFatal {
    tag: 'fatal',
    val: string,
  }
}
