// Kept identical to the first example in README.md (test/readme.test.ts checks it).
import { AppServerClient } from "appserver-client";

const client = await AppServerClient.spawn("appserver", ["app-server", "--log-level", "warning"]);
try {
  const { thread } = await client.threadStart({ identity: { channelName: "cli", userId: "me" } });
  const outcome = await client.runTurn(thread.id, "hello");
  console.log(outcome.status, "-", outcome.text);
  console.log(outcome.items.map((item) => item.type));
} finally {
  await client.close();
}
