// The host interface for tests run in Node (`bin/test.mjs` puts it in place of
// `sluice:plugin/host@0.2.0`): logs go to the console, counters and gauges to
// maps a test reads with `counters()` and `gauges()`.
const counterMap = new Map();
const gaugeMap = new Map();
let context = { changefeed: 'test/changefeed', savedCheckpoint: 0n };

export function log(level, message) { console.error(`[${level}] ${message}`); }
export function counterAdd(name, value) { counterMap.set(name, (counterMap.get(name) ?? 0n) + BigInt(value)); }
export function gaugeSet(name, value) { gaugeMap.set(name, value); }
export function nowMillis() { return BigInt(Date.now()); }
export function changefeed() { return context.changefeed; }
export function savedCheckpoint() { return context.savedCheckpoint; }

/** Counters added so far, as an object of BigInts. */
export function counters() { return Object.fromEntries(counterMap); }
/** Gauges set so far. */
export function gauges() { return Object.fromEntries(gaugeMap); }
/** Forget counters and gauges; set what `changefeed()` and `savedCheckpoint()` return. */
export function reset(changefeedName = 'test/changefeed', checkpoint = 0n) {
  counterMap.clear();
  gaugeMap.clear();
  context = { changefeed: changefeedName, savedCheckpoint: BigInt(checkpoint) };
}
