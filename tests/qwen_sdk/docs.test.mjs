// The Qwen SDK example of docs/faces.md is example.mjs, and it runs.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { APPSERVER, REPO, workspace } from './helpers.mjs';

const EXAMPLE = fileURLToPath(new URL('./example.mjs', import.meta.url));
const MARK = '<!-- tested: tests/qwen_sdk -->';

test('docs/faces.md shows example.mjs', (t) => {
  const doc = readFileSync(join(REPO, 'docs', 'faces.md'), 'utf8');
  const start = doc.indexOf(MARK);
  if (start < 0) {
    t.skip('docs/faces.md has no Qwen SDK example yet');
    return;
  }
  const block = doc.slice(start + MARK.length).match(/^\n```js\n([\s\S]*?)\n```/);
  assert.ok(block, `a js code block follows ${MARK}`);
  assert.equal(block[1] + '\n', readFileSync(EXAMPLE, 'utf8'));
});

test('example.mjs runs against appserver on PATH', async (t) => {
  const cwd = workspace(t);
  const env = {
    ...process.env,
    APPSERVER_PROVIDER: 'offline',
    PATH: `${dirname(APPSERVER)}${delimiter}${process.env.PATH}`,
  };
  const { stdout } = await promisify(execFile)(process.execPath, [EXAMPLE], { cwd, env });
  assert.match(stdout, /^allow shell \{"command":"echo hello from the Qwen SDK"\}$/m);
  assert.match(stdout, /^tool said: exit code: 0\nhello from the Qwen SDK$/m);
  assert.match(stdout, /^The command exited with code 0\.$/m);
});
