#!/usr/bin/env node
// sluice-js-test FILE.test.js...: runs plugin tests in Node with node:test.
// Each file is bundled (esbuild) with `sluice:plugin/host@0.2.0` replaced by
// src/host-stub.js, so a plugin and its tests run without WebAssembly.
import { build } from 'esbuild';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const stub = resolve(here, '../src/host-stub.js');
const httpStub = resolve(here, '../src/wasi-http-stub.js');
const files = process.argv.slice(2);
if (files.length === 0) {
  console.error('usage: sluice-js-test FILE.test.js...');
  process.exit(2);
}
const out = mkdtempSync(join(tmpdir(), 'sluice-js-test-'));
const bundles = [];
for (const file of files) {
  const bundle = join(out, basename(file).replace(/\.[cm]?[jt]s$/, '') + '.mjs');
  await build({
    entryPoints: [file],
    bundle: true,
    format: 'esm',
    platform: 'node',
    outfile: bundle,
    logLevel: 'warning',
    plugins: [{
      name: 'sluice-host-stub',
      setup(b) {
        b.onResolve({ filter: /^sluice:plugin\/host@/ }, () => ({ path: stub }));
        b.onResolve({ filter: /^wasi:http\// }, () => ({ path: httpStub }));
      },
    }],
  });
  bundles.push(bundle);
}
const run = spawnSync(process.execPath, ['--test', ...bundles], { stdio: 'inherit' });
rmSync(out, { recursive: true, force: true });
process.exit(run.status ?? 1);
