// Drive appserver with Qwen Code's TypeScript SDK: one turn that runs a shell
// command after canUseTool allowed it.
import { query } from '@qwen-code/sdk';

const q = query({
  prompt: '!echo hello from the Qwen SDK',
  options: {
    pathToQwenExecutable: 'appserver', // on PATH, or an absolute path to it
    cwd: process.cwd(), // the workspace (its state lives in .craft/)
    canUseTool: async (toolName, input) => {
      console.log(`allow ${toolName} ${JSON.stringify(input)}`);
      return { behavior: 'allow', updatedInput: input };
    },
  },
});

for await (const message of q) {
  if (message.type === 'user') {
    for (const block of message.message.content) {
      if (block.type === 'tool_result') console.log(`tool said: ${block.content}`);
    }
  } else if (message.type === 'result') {
    console.log(message.is_error ? `error: ${message.error?.message}` : message.result);
  }
}
