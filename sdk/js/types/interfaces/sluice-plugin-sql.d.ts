// Generated from wit/plugin.wit by sdk/js/bin/types.mjs; do not edit.
declare module 'sluice:plugin/sql@0.2.0' {
  /**
   * Every session runs in UTC (MySQL `time_zone = '+00:00'`, PostgreSQL
   * `TimeZone = UTC`). Statements are written in the granted database's
   * own dialect: `?`
   * placeholders for MySQL, MariaDB and TiDB; `$1`, `$2`, ... for
   * PostgreSQL, where every parameter is sent as text (or bytes, for
   * `bytes`) and read by the type the server infers for it, so a value
   * fits any column type whose input accepts its text (numeric, date,
   * timestamp, json, uuid, ...). PostgreSQL results of types other than
   * bool, integers, floats, text, json and bytea must be cast to text in
   * the statement (`SELECT created::text`).
   * 
   * Runs `groups` on the granted database `database`: each group in one
   * transaction on a pooled connection, different groups concurrently on
   * different connections (at most the grant's connection count at once).
   * Returns the rows each group affected, in order. On failure returns the
   * first failed group's error; every group that failed was rolled back,
   * groups that committed stay committed.
   */
  export function execute(database: string, groups: Array<Array<Statement>>): BigUint64Array;
  /**
   * Runs one statement and returns at most `max-rows` of its rows.
   */
  export function query(database: string, statement: Statement, maxRows: number): Array<Array<Value>>;
  /**
   * A parameter or a result value.
   */
  export type Value = ValueNull | ValueInt | ValueUint | ValueFloat | ValueText | ValueBytes;
  export interface ValueNull {
    tag: 'null',
  }
  export interface ValueInt {
    tag: 'int',
    val: bigint,
  }
  export interface ValueUint {
    tag: 'uint',
    val: bigint,
  }
  export interface ValueFloat {
    tag: 'float',
    val: number,
  }
  export interface ValueText {
    tag: 'text',
    val: string,
  }
  export interface ValueBytes {
    tag: 'bytes',
    val: Uint8Array,
  }
  /**
   * One statement with its parameters, bound in order.
   */
  export interface Statement {
    sql: string,
    params: Array<Value>,
  }
  /**
   * What a failure means for the sink.
   * # Variants
   * 
   * ## `"retryable"`
   * 
   * Duplicate key, deadlock, lock wait timeout, lost or refused
   * connection, server busy: back off and retry (the host replays).
   * ## `"fatal"`
   * 
   * Syntax, permission, unknown table or column, bad value: retrying
   * will not help.
   * ## `"denied"`
   * 
   * The database is not granted to this plugin, or the request is
   * over a bound (statements, parameters, bytes).
   */
  export type ErrorKind = 'retryable' | 'fatal' | 'denied';
  export interface SqlError {
    kind: ErrorKind,
    /**
     * The server's error number (MySQL, MariaDB, TiDB; 0 when the
     * failure was not the server's or the server has none, as PostgreSQL).
     */
    code: number,
    /**
     * The server's five-character SQLSTATE (`23505`, `40001`, ...;
     * empty when the failure was not the server's).
     */
    sqlstate: string,
    /**
     * What went wrong, without credentials.
     */
    message: string,
  }
}
