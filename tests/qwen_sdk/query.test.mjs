// @qwen-code/sdk 0.1.14's query() driving appserver's Qwen Code face.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { query } from '@qwen-code/sdk';

import { collect, ofType, options, texts, toolResults, workspace } from './helpers.mjs';

test('a plain turn', async (t) => {
  const cwd = workspace(t);
  const messages = await collect(query({ prompt: 'hello there', options: options(cwd) }));
  const [init] = ofType(messages, 'system');
  assert.equal(init.subtype, 'init');
  assert.equal(init.cwd, cwd);
  assert.ok(init.tools.includes('shell'));
  assert.deepEqual(texts(messages), ['You said: hello there']);
  const [result] = ofType(messages, 'result');
  assert.equal(result.subtype, 'success');
  assert.equal(result.is_error, false);
  assert.equal(result.result, 'You said: hello there');
  assert.equal(result.num_turns, 1);
  assert.ok(result.usage.input_tokens > 0 && result.usage.output_tokens === 4);
  assert.equal(result.session_id, init.session_id);
  assert.equal(messages.at(-1), result);
});

test('a shell call allowed through canUseTool', async (t) => {
  const cwd = workspace(t);
  const asked = [];
  const canUseTool = async (toolName, input) => {
    asked.push([toolName, input]);
    return { behavior: 'allow', updatedInput: input };
  };
  const q = query({ prompt: '!touch allowed.txt', options: options(cwd, { canUseTool }) });
  const messages = await collect(q);
  assert.deepEqual(asked, [['shell', { command: 'touch allowed.txt' }]]);
  assert.ok(existsSync(join(cwd, 'allowed.txt')));
  const toolUse = ofType(messages, 'assistant')[0].message;
  assert.equal(toolUse.stop_reason, 'tool_use');
  assert.equal(toolUse.content[0].type, 'tool_use');
  const [toolResult] = toolResults(messages);
  assert.equal(toolResult.tool_use_id, toolUse.content[0].id);
  assert.equal(toolResult.is_error, false);
  const [result] = ofType(messages, 'result');
  assert.equal(result.result, 'The command exited with code 0.');
  assert.equal(result.num_turns, 2);
  assert.deepEqual(result.permission_denials, []);
});

test('a shell call denied through canUseTool', async (t) => {
  const cwd = workspace(t);
  const canUseTool = async () => ({ behavior: 'deny', message: 'not today' });
  const q = query({ prompt: '!touch denied.txt', options: options(cwd, { canUseTool }) });
  const messages = await collect(q);
  assert.equal(existsSync(join(cwd, 'denied.txt')), false);
  const [toolResult] = toolResults(messages);
  assert.equal(toolResult.is_error, true);
  assert.match(toolResult.content, /^Declined/);
  const [result] = ofType(messages, 'result');
  assert.equal(result.result, 'The shell call was declined.');
  assert.equal(result.permission_denials.length, 1);
  assert.equal(result.permission_denials[0].tool_name, 'shell');
});

test('without canUseTool the SDK denies', async (t) => {
  const cwd = workspace(t);
  const messages = await collect(query({ prompt: '!touch nope.txt', options: options(cwd) }));
  assert.equal(existsSync(join(cwd, 'nope.txt')), false);
  assert.equal(ofType(messages, 'result')[0].result, 'The shell call was declined.');
});

test('yolo runs the call without asking', async (t) => {
  const cwd = workspace(t);
  const canUseTool = async () => assert.fail('not asked under yolo');
  const q = query({
    prompt: '!touch yolo.txt',
    options: options(cwd, { canUseTool, permissionMode: 'yolo' }),
  });
  const messages = await collect(q);
  assert.ok(existsSync(join(cwd, 'yolo.txt')));
  assert.equal(ofType(messages, 'system')[0].permission_mode, 'yolo');
});

test('an interrupt mid-stream ends the turn', async (t) => {
  const cwd = workspace(t);
  const q = query({
    prompt: '?stream 1000\n?delay 20',
    options: options(cwd, { includePartialMessages: true }),
  });
  const messages = [];
  let interrupted = false;
  const started = Date.now();
  for await (const message of q) {
    messages.push(message);
    const delta = message.type === 'stream_event' && message.event.type === 'content_block_delta';
    if (delta && !interrupted) {
      interrupted = true;
      await q.interrupt();
    }
  }
  assert.ok(interrupted);
  assert.ok(Date.now() - started < 10_000);
  const [result] = ofType(messages, 'result');
  assert.equal(result.is_error, true);
  assert.equal(result.subtype, 'error_during_execution');
  assert.equal(result.error.message, 'Operation cancelled.');
  const partial = texts(messages).join('');
  assert.match(partial, /^chunk 1 /);
  assert.ok(!partial.includes('chunk 1000'));
});

test('a second query resumes the first session', async (t) => {
  const cwd = workspace(t);
  const sessionId = randomUUID();
  const first = await collect(
    query({ prompt: 'remember the word apple', options: options(cwd, { sessionId }) }),
  );
  assert.equal(ofType(first, 'result')[0].session_id, sessionId);
  const resumed = await collect(
    query({ prompt: 'which word?', options: options(cwd, { resume: sessionId }) }),
  );
  const fresh = await collect(query({ prompt: 'which word?', options: options(cwd) }));
  const [again] = ofType(resumed, 'result');
  const [alone] = ofType(fresh, 'result');
  assert.equal(again.session_id, sessionId);
  assert.notEqual(alone.session_id, sessionId);
  // The resumed turn's model call carried the first turn too.
  assert.ok(again.usage.input_tokens > alone.usage.input_tokens + 5);
});

test('control requests: models, permission mode, commands', async (t) => {
  const cwd = workspace(t);
  let release;
  const hold = new Promise((resolve) => (release = resolve));
  async function* prompts() {
    await hold;
    yield {
      type: 'user',
      session_id: '',
      message: { role: 'user', content: '!touch after-mode.txt' },
      parent_tool_use_id: null,
    };
  }
  const logs = [];
  const q = query({ prompt: prompts(), options: options(cwd, { stderr: (line) => logs.push(line) }) });
  const models = await q.getAvailableModels();
  assert.deepEqual(models.models.map((m) => m.id), ['offline']);
  await q.setModel('offline');
  await assert.rejects(q.setModel('no-such-model'), /no-such-model/);
  const commands = await q.supportedCommands();
  assert.deepEqual(commands.commands, ['compress']);
  await q.setPermissionMode('auto-edit');
  await q.setPermissionMode('yolo');
  await assert.rejects(q.getContextUsage(), /get_context_usage/);
  release();
  const messages = await collect(q);
  assert.ok(logs.some((line) => line.includes('Unknown control request subtype: get_context_usage')));
  assert.ok(existsSync(join(cwd, 'after-mode.txt')));
  assert.equal(ofType(messages, 'system')[0].permission_mode, 'yolo');
});
