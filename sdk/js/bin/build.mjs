#!/usr/bin/env node
// sluice-js-build ENTRY.js --kind sink|filter [--out FILE.wasm] [--wit DIR] [--memory-mib N] [--aot [--weval PATH]]
//
// Bundles ENTRY.js with what it imports (esbuild; `sluice:*` and `wasi:*`
// imports stay imports) and makes a WebAssembly component of it for the
// `sluice:plugin` world of that kind (componentize-js). Works offline once
// `npm install` has run in sdk/js.
import { build } from 'esbuild';
import { componentize } from '@bytecodealliance/componentize-js';
import { writeFile } from 'node:fs/promises';
import { dirname, resolve, basename } from 'node:path';
import { fileURLToPath } from 'node:url';

// `bytes` with a custom section `sluice:limits` holding `text` appended (a
// component may end with custom sections).
function withLimits(bytes, text) {
  const leb = (n) => {
    const out = [];
    do {
      let b = n & 0x7f;
      n >>>= 7;
      if (n) b |= 0x80;
      out.push(b);
    } while (n);
    return out;
  };
  const enc = new TextEncoder();
  const name = enc.encode('sluice:limits');
  const payload = [...leb(name.length), ...name, ...enc.encode(text)];
  return Buffer.concat([Buffer.from(bytes), Buffer.from([0, ...leb(payload.length), ...payload])]);
}

const args = process.argv.slice(2);
const flag = (name) => {
  const i = args.indexOf(name);
  if (i < 0) return undefined;
  const v = args[i + 1];
  args.splice(i, 2);
  return v;
};
const kind = flag('--kind') ?? 'sink';
// Ahead-of-time compilation of the engine's interpreter for this script
// (componentize-js's `enableAot`, with weval): `--aot`, with the weval binary
// from `--weval PATH` or $SLUICE_WEVAL, else the one componentize-js downloads.
const aot = args.includes('--aot');
if (aot) args.splice(args.indexOf('--aot'), 1);
const wevalBin = flag('--weval') ?? process.env.SLUICE_WEVAL;
const memory = Number(flag('--memory-mib') ?? 128);
if (!Number.isInteger(memory) || memory < 1 || memory > 4096) {
  console.error('--memory-mib must be a whole number of MiB from 1 to 4096');
  process.exit(2);
}
const here = dirname(fileURLToPath(import.meta.url));
const witFlag = flag('--wit');
// sdk/js/wit: the contract's worlds with outbound HTTP (src/http.js).
const wit = resolve(witFlag ?? resolve(here, '../wit'));
const world = witFlag ? `sluice:plugin/${kind}@0.2.0` : `sluice:js/${kind}`;
const outFlag = flag('--out');
const entry = args[0];
const out = outFlag ?? (entry && basename(entry).replace(/\.[cm]?[jt]s$/, '') + '.wasm');
if (!entry || !['sink', 'filter'].includes(kind)) {
  console.error('usage: sluice-js-build ENTRY.js --kind sink|filter [--out FILE.wasm] [--wit DIR] [--memory-mib N] [--aot [--weval PATH]]');
  process.exit(2);
}
const started = Date.now();
const bundle = await build({
  entryPoints: [entry],
  bundle: true,
  format: 'esm',
  platform: 'neutral',
  write: false,
  external: ['sluice:*', 'wasi:*'],
  logLevel: 'warning',
});
console.error(`bundled ${entry} (${bundle.outputFiles[0].contents.length} bytes); making the component...`);
const { component } = await componentize(bundle.outputFiles[0].text, {
  witPath: wit,
  worldName: world,
  disableFeatures: ['fetch-event'],
  ...(aot ? { enableAot: true, ...(wevalBin ? { wevalBin } : {}) } : {}),
});
// The memory the engine needs at the pipeline's batch sizes, declared in a
// `sluice:limits` custom section: the host's default quota for this plugin
// when a changefeed gives none (its garbage collector lets the heap grow to
// about 80 MiB before it collects; see README.md, "Memory and speed").
await writeFile(out, withLimits(component, `memory = ${memory * 1048576}\n`));
console.error(`${out}: ${(component.length / 1048576).toFixed(1)} MiB component for the ${kind} world (declares memory = ${memory} MiB) in ${((Date.now() - started) / 1000).toFixed(1)} s`);
