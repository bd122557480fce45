#!/usr/bin/env node
// sluice-js-build ENTRY.js --kind sink|filter [--out FILE.wasm] [--wit DIR]
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

const args = process.argv.slice(2);
const flag = (name) => {
  const i = args.indexOf(name);
  if (i < 0) return undefined;
  const v = args[i + 1];
  args.splice(i, 2);
  return v;
};
const kind = flag('--kind') ?? 'sink';
const here = dirname(fileURLToPath(import.meta.url));
const wit = resolve(flag('--wit') ?? resolve(here, '../../../wit'));
const entry = args[0];
const out = flag('--out') ?? (entry && basename(entry).replace(/\.[cm]?[jt]s$/, '') + '.wasm');
if (!entry || !['sink', 'filter'].includes(kind)) {
  console.error('usage: sluice-js-build ENTRY.js --kind sink|filter [--out FILE.wasm] [--wit DIR]');
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
  worldName: `sluice:plugin/${kind}@0.2.0`,
  disableFeatures: ['fetch-event'],
});
await writeFile(out, component);
console.error(`${out}: ${(component.length / 1048576).toFixed(1)} MiB component for the ${kind} world in ${((Date.now() - started) / 1000).toFixed(1)} s`);
