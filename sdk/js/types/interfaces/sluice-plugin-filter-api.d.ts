// Generated from wit/plugin.wit by sdk/js/bin/types.mjs; do not edit.
/// <reference path="./sluice-plugin-types.d.ts" />
declare module 'sluice:plugin/filter-api@0.2.0' {
  /**
   * Check a configuration (JSON text) without side effects.
   */
  export function validateConfig(config: string): void;
  /**
   * Start the instance with its configuration (JSON text).
   */
  export function open(config: string): void;
  /**
   * Transform a batch: drop rows, rewrite values, route. The result's `schemas`
   * lists only schemas the filter itself introduces (for example after a
   * projection); table batches may refer to any schema of the input.
   */
  export function transform(batch: Batch): Batch;
  export type Batch = import('sluice:plugin/types@0.2.0').Batch;
  export type Error = import('sluice:plugin/types@0.2.0').Error;
}
