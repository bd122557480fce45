// Generated from wit/plugin.wit by sdk/js/bin/types.mjs; do not edit.
/// <reference path="./sluice-plugin-types.d.ts" />
declare module 'sluice:plugin/sink-api@0.2.0' {
  /**
   * Check a configuration (JSON text) without side effects. Called before a
   * changefeed is persisted.
   */
  export function validateConfig(config: string): void;
  /**
   * Start the instance with its configuration (JSON text). Called once per instance.
   */
  export function open(config: string): void;
  /**
   * Accept a batch. It need not be durable until `flush`.
   */
  export function write(batch: Batch): void;
  /**
   * Make every row with commit ts <= `ts` durable downstream, then return. Returning
   * `ok` is the acknowledgement that lets the checkpoint pass `ts`.
   */
  export function flush(ts: bigint): void;
  /**
   * Apply a schema change; every row below its commit ts was flushed before.
   */
  export function applyDdl(ddl: DdlEvent): void;
  /**
   * Release resources; the instance is dropped afterwards.
   */
  export function close(): void;
  export type Batch = import('sluice:plugin/types@0.2.0').Batch;
  export type DdlEvent = import('sluice:plugin/types@0.2.0').DdlEvent;
  export type Error = import('sluice:plugin/types@0.2.0').Error;
}
