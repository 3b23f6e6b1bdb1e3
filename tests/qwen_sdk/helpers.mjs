// Shared by the tests: where appserver is, and a fresh workspace per query.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));
export const APPSERVER = join(REPO, '.venv', 'bin', 'appserver');

export function workspace(t) {
  const dir = mkdtempSync(join(tmpdir(), 'qwen-sdk-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export function options(cwd, extra = {}) {
  return {
    pathToQwenExecutable: APPSERVER,
    cwd,
    env: { APPSERVER_PROVIDER: 'offline' },
    ...extra,
  };
}

export async function collect(q) {
  const messages = [];
  for await (const message of q) messages.push(message);
  return messages;
}

export const ofType = (messages, type) => messages.filter((m) => m.type === type);

export function texts(messages) {
  return ofType(messages, 'assistant')
    .flatMap((m) => m.message.content)
    .filter((b) => b.type === 'text')
    .map((b) => b.text);
}

export function toolResults(messages) {
  return ofType(messages, 'user').flatMap((m) => m.message.content).filter((b) => b.type === 'tool_result');
}
