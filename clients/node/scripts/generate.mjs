#!/usr/bin/env node
// Write src/generated.ts: the protocol's TypeScript types, from the server itself.
//
// There is one generator, the server's (`appserver schema --ts OUT`,
// appserver/protocol/typescript.py); this script runs it for src/generated.ts so the
// client's types and typed methods cannot drift from the server. `make test` runs it
// with --check (`npm run check-generated`).
//
//   node scripts/generate.mjs            rewrite src/generated.ts
//   node scripts/generate.mjs --check    exit 1 if src/generated.ts is stale
//   node scripts/generate.mjs --out PATH write PATH instead
//
// The server's Python comes from $APPSERVER_PYTHON, else the repository's .venv
// (what `make` builds). A client in another repository needs none of this: run
// `appserver schema --ts protocol.ts` with any installed appserver.

import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const PACKAGE_ROOT = resolve(HERE, "..");
const REPO_ROOT = resolve(PACKAGE_ROOT, "../..");
const DEFAULT_OUT = resolve(PACKAGE_ROOT, "src", "generated.ts");
const VENV_PYTHON = resolve(REPO_ROOT, ".venv", "bin", "python");

function main(argv) {
  let outPath = DEFAULT_OUT;
  let check = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--check") check = true;
    else if (arg === "--out") outPath = resolve(argv[++i]);
    else {
      process.stderr.write("usage: generate.mjs [--check] [--out PATH]\n");
      return 2;
    }
  }
  const python = process.env.APPSERVER_PYTHON ?? VENV_PYTHON;
  if (!process.env.APPSERVER_PYTHON && !existsSync(python)) {
    process.stderr.write(`generate.mjs: ${python} is missing; run \`make\` in ${REPO_ROOT} (or set APPSERVER_PYTHON)\n`);
    return 1;
  }
  const args = ["-m", "appserver.protocol.typescript", outPath, ...(check ? ["--check"] : [])];
  const done = spawnSync(python, args, { cwd: REPO_ROOT, stdio: ["ignore", "inherit", "pipe"], encoding: "utf8" });
  if (done.error) {
    process.stderr.write(`generate.mjs: could not run ${python}: ${done.error.message}\n`);
    return 1;
  }
  if (done.status !== 0) {
    process.stderr.write(done.stderr);
    if (check) {
      const shown = relative(process.cwd(), outPath) || outPath;
      process.stderr.write(`generate.mjs: ${shown} is stale; run \`npm run generate\` in clients/node (or \`make schema\`)\n`);
    }
    return done.status ?? 1;
  }
  if (!check) process.stderr.write(`${relative(process.cwd(), outPath) || outPath}\n`);
  return 0;
}

process.exitCode = main(process.argv.slice(2));
