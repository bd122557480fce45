#!/usr/bin/env node
// Generate the TypeScript declarations of the plugin contract from the WIT
// (wit/plugin.wit) into types/: one file per world and one per interface, as
// a guest sees them (what `import ... from 'sluice:plugin/host@0.2.0'` gives,
// what `sinkApi` / `filterApi` must export).
//
//   node bin/types.mjs            write sdk/js/types/
//   node bin/types.mjs --check    fail if types/ differs from the WIT
import { readFile, writeFile, mkdir, readdir, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '..');
const wit = resolve(root, '../../wit/plugin.wit');
const out = join(root, 'types');
const check = process.argv.includes('--check');

// jco's type generator is a WASI component run in Node; the WASI shim it uses
// gives it no filesystem unless told to, so grant it the WIT's folder only.
const require = createRequire(import.meta.url);
const transpile = resolve(dirname(require.resolve('@bytecodealliance/jco-transpile')), '..');
const shimPkg = createRequire(join(transpile, 'package.json')).resolve('@bytecodealliance/preview2-shim/filesystem');
const shim = await import(pathToFileURL(shimPkg).href);
shim._setPreopens({ [dirname(wit)]: dirname(wit) });
const { generateGuestTypes } = await import(pathToFileURL(join(transpile, 'dist/index.js')).href);

const files = {};
for (const world of ['sink', 'filter']) {
  const generated = await generateGuestTypes(wit, { worldName: world, name: world, outDir: '' });
  for (const [name, text] of Object.entries(generated)) {
    files[name] = typeof text === 'string' ? text : new TextDecoder().decode(text);
  }
}
const header = '// Generated from wit/plugin.wit by sdk/js/bin/types.mjs; do not edit.\n';

if (check) {
  const stale = [];
  for (const [name, text] of Object.entries(files)) {
    const have = await readFile(join(out, name), 'utf8').catch(() => null);
    if (have !== header + text) stale.push(name);
  }
  const present = await readdir(out, { recursive: true }).catch(() => []);
  for (const name of present) {
    if (name.endsWith('.d.ts') && !(name in files)) stale.push(`${name} (no longer generated)`);
  }
  if (stale.length) {
    console.error(`sdk/js/types is out of date with wit/plugin.wit: ${stale.join(', ')}\nrun: node sdk/js/bin/types.mjs`);
    process.exit(1);
  }
  console.log(`sdk/js/types matches wit/plugin.wit (${Object.keys(files).length} files)`);
} else {
  await rm(out, { recursive: true, force: true });
  for (const [name, text] of Object.entries(files)) {
    await mkdir(dirname(join(out, name)), { recursive: true });
    await writeFile(join(out, name), header + text);
  }
  console.log(`wrote ${Object.keys(files).length} files to ${out}`);
}
