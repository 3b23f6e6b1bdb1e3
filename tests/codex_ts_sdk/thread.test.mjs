// @openai/codex-sdk 0.163.0 (one `exec --experimental-json` process per turn) driving
// appserver's Codex exec face: two turns on one thread, then a resume.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { codex, collect, threadOptions, workspace } from './helpers.mjs';

test('two turns on one thread, then resumeThread(id) continues it', async (t) => {
  const cwd = workspace(t);
  const thread = codex().startThread(threadOptions(cwd, { sandboxMode: 'workspace-write' }));
  assert.equal(thread.id, null);

  const first = await thread.run('hello there');
  assert.equal(first.finalResponse, 'You said: hello there');
  assert.deepEqual(first.items, [{ id: 'item_0', type: 'agent_message', text: 'You said: hello there' }]);
  assert.ok(first.usage.input_tokens > 0 && first.usage.output_tokens > 0);
  const id = thread.id;
  assert.ok(id);

  const second = await thread.run('!echo hi-$((6*7))');
  assert.equal(thread.id, id);
  const [command] = second.items.filter((item) => item.type === 'command_execution');
  assert.deepEqual(command, {
    id: 'item_0',
    type: 'command_execution',
    command: 'echo hi-$((6*7))',
    aggregated_output: 'hi-42\n',
    exit_code: 0,
    status: 'completed',
  });
  assert.equal(second.finalResponse, 'The command exited with code 0.');
  // Codex reports the thread's totals so far: the second turn adds to the first.
  assert.ok(second.usage.input_tokens > first.usage.input_tokens);

  const resumed = codex().resumeThread(id, threadOptions(cwd));
  assert.equal(resumed.id, id);
  const { events } = await resumed.runStreamed('>notes.txt\nfrom a resumed thread');
  const seen = [];
  for await (const event of events) seen.push(event);
  assert.deepEqual(seen[0], { type: 'thread.started', thread_id: id });
  assert.equal(seen[1].type, 'turn.started');
  const change = seen.find((e) => e.type === 'item.completed' && e.item.type === 'file_change');
  assert.deepEqual(change.item.changes, [{ path: 'notes.txt', kind: 'add' }]);
  assert.equal(change.item.status, 'completed');
  assert.equal(readFileSync(join(cwd, 'notes.txt'), 'utf8'), 'from a resumed thread\n');
  const end = seen.at(-1);
  assert.equal(end.type, 'turn.completed');
  assert.ok(end.usage.input_tokens > second.usage.input_tokens);
});

test('streamed events of a command, as exec writes them', async (t) => {
  const cwd = workspace(t);
  const thread = codex().startThread(threadOptions(cwd));
  const events = await collect(await thread.runStreamed('!echo streamed'));
  assert.deepEqual(
    events.map((e) => (e.item ? `${e.type}:${e.item.type}` : e.type)),
    [
      'thread.started',
      'turn.started',
      'item.started:command_execution',
      'item.completed:command_execution',
      'item.completed:agent_message',
      'turn.completed',
    ],
  );
  assert.equal(events[2].item.status, 'in_progress');
  assert.equal(events[3].item.aggregated_output, 'streamed\n');
});

test('a failed turn rejects run() with its message', async (t) => {
  const cwd = workspace(t);
  const thread = codex().startThread(threadOptions(cwd));
  await assert.rejects(thread.run('?fail other boom'), /model provider error \(other\): boom/);
});

test('outputSchema: a final answer that is not matching JSON rejects run(), after streaming it', async (t) => {
  const cwd = workspace(t);
  const thread = codex().startThread(threadOptions(cwd));
  const outputSchema = { type: 'object', properties: { answer: { type: 'integer' } } };
  // The offline model answers "You said: ..." whatever the schema asks.
  await assert.rejects(
    thread.run('hello', { outputSchema }),
    /the final message does not match --output-schema: not JSON/,
  );
  // Streamed: the answer, turn.failed, then (exit 1) the stream throws with the reason.
  const events = [];
  const streamed = await thread.runStreamed('again', { outputSchema });
  await assert.rejects(async () => {
    for await (const event of streamed.events) events.push(event);
  }, /exited with code 1: appserver: the final message does not match --output-schema/);
  const said = events.filter((event) => event.type === 'item.completed').map((e) => e.item.text);
  assert.deepEqual(said, ['You said: again']);
  assert.equal(events.at(-1).type, 'turn.failed');
});

test('nobody to ask: with approvalPolicy untrusted a write is declined', async (t) => {
  const cwd = workspace(t);
  const thread = codex().startThread(threadOptions(cwd, { approvalPolicy: 'untrusted' }));
  const turn = await thread.run('>notes.txt\nnot written');
  const [change] = turn.items.filter((item) => item.type === 'file_change');
  assert.equal(change.status, 'failed');
  assert.equal(existsSync(join(cwd, 'notes.txt')), false);
});
