// Shared by the tests: where appserver-codex is, and a fresh workspace per test.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { Codex } from '@openai/codex-sdk';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));
// The installed console script (make installs it); APPSERVER_CODEX names another one.
export const APPSERVER_CODEX =
  process.env.APPSERVER_CODEX ?? join(REPO, '.venv', 'bin', 'appserver-codex');

export function workspace(t) {
  const dir = mkdtempSync(join(tmpdir(), 'codex-ts-sdk-'));
  // The SDK rejects run() at turn.failed and kills appserver-codex, which may still be
  // closing its database under .craft (removing files, never making them: it writes
  // turn.failed once its runtime is done with the turn). rmSync retries what that races.
  t.after(() => rmSync(dir, { recursive: true, force: true, maxRetries: 20, retryDelay: 50 }));
  return dir;
}

// A Codex pointed at appserver-codex, as a user would: codexPathOverride, the offline model.
export function codex() {
  return new Codex({
    codexPathOverride: APPSERVER_CODEX,
    env: { ...process.env, APPSERVER_PROVIDER: 'offline' },
  });
}

export function threadOptions(cwd, extra = {}) {
  return { workingDirectory: cwd, skipGitRepoCheck: true, ...extra };
}

export async function collect(streamed) {
  const events = [];
  for await (const event of streamed.events) events.push(event);
  return events;
}
