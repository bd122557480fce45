// Generated from wit/plugin.wit by sdk/js/bin/types.mjs; do not edit.
declare module 'sluice:plugin/host@0.2.0' {
  /**
   * Write a line to the host log, tagged with the changefeed and plugin.
   */
  export function log(level: Level, message: string): void;
  /**
   * Add to a plugin counter, exported as `sluice_plugin_counter_total{name=...}`.
   * Names are 1 to 128 bytes, at most 256 of them; others are ignored.
   */
  export function counterAdd(name: string, value: bigint): void;
  /**
   * Set a plugin gauge, exported as `sluice_plugin_gauge{name=...}`. Same
   * names as counters; NaN and infinities are ignored.
   */
  export function gaugeSet(name: string, value: number): void;
  /**
   * Wall-clock time in milliseconds since the Unix epoch.
   */
  export function nowMillis(): bigint;
  /**
   * The changefeed this instance runs for, as `tenant/name`: the same across
   * restarts, retries and swaps (a sink keys state it keeps downstream by it).
   */
  export function changefeed(): string;
  /**
   * The changefeed's checkpoint as last saved durably (0: none yet). After a
   * restart nothing at or below it is delivered again, so a sink may forget
   * what it kept to recognise rows it already applied up to there.
   */
  export function savedCheckpoint(): bigint;
  /**
   * # Variants
   * 
   * ## `"trace"`
   * 
   * ## `"debug"`
   * 
   * ## `"info"`
   * 
   * ## `"warn"`
   * 
   * ## `"error"`
   */
  export type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error';
}
