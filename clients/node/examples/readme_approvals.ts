// Kept identical to the approvals example in README.md (test/readme.test.ts checks it).
import { AppServerClient } from "appserver-client";

const client = await AppServerClient.connect(process.env.APPSERVER_URL ?? "ws://127.0.0.1:9100", {
  token: process.env.APPSERVER_TOKEN,
  approvalHandler: (request) => {
    console.log(`[approve ${request.approvalType}: ${request.operation}]`);
    return "accept";
  },
});
const { thread } = await client.threadStart({ identity: { channelName: "cli", userId: "me" } });
const outcome = await client.runTurn(thread.id, "!touch hello.txt", {
  onNotification: (event) => {
    if (event.method === "item/agentMessage/delta") process.stdout.write(event.params.delta);
  },
});
console.log(`\n${outcome.status}`);
await client.close();
