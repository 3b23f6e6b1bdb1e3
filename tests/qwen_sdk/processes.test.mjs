// Two @qwen-code/sdk query() calls at once in one directory (issue 28): each
// spawns its own appserver process on the same workspace; both answer, and
// neither waits for the other to end.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { query } from '@qwen-code/sdk';

import { collect, ofType, options, texts, workspace } from './helpers.mjs';

function expectAnswer(messages, prompt) {
  assert.deepEqual(texts(messages), [`You said: ${prompt}`]);
  const [result] = ofType(messages, 'result');
  assert.equal(result.subtype, 'success');
  assert.equal(result.is_error, false);
  assert.equal(result.result, `You said: ${prompt}`);
  return result.session_id;
}

test('two queries at once in one directory both answer', async (t) => {
  const cwd = workspace(t);
  const prompts = ['from the first query', 'from the second query'];
  const runs = await Promise.all(
    prompts.map((prompt) => collect(query({ prompt, options: options(cwd) }))),
  );
  const sessions = runs.map((messages, index) => expectAnswer(messages, prompts[index]));
  assert.notEqual(sessions[0], sessions[1]);
});

test('a query answers while another one in the directory is still open', async (t) => {
  const cwd = workspace(t);
  let release;
  const hold = new Promise((resolve) => (release = resolve));
  async function* held() {
    await hold; // the first process stays up, serving the workspace, until released
    yield {
      type: 'user',
      session_id: '',
      message: { role: 'user', content: 'the first, at last' },
      parent_tool_use_id: null,
    };
  }
  const first = query({ prompt: held(), options: options(cwd) });
  await first.supportedCommands(); // its process is up and answering
  const second = await collect(query({ prompt: 'the second', options: options(cwd) }));
  expectAnswer(second, 'the second');
  release();
  expectAnswer(await collect(first), 'the first, at last');
});
