// Human words for the protocol's status words (docs/web.md): one table, so the page
// never shows `Approval: accept` or `cancelled: serverShutdown`. A word missing here
// is shown as it is, so a newer server's words still read.

/** Wire word -> what the page says. Keys are `kind:word`. */
export const WORDS = {
  // approval decisions (`approvalResponse` items)
  "decision:accept": "Approved once",
  "decision:acceptForSession": "Approved for this thread",
  "decision:acceptAlways": "Approved for good",
  "decision:decline": "Declined",
  "decision:cancel": "Declined, turn cancelled",
  // turn states
  "turn:running": "Running…",
  "turn:completed": "Done",
  "turn:failed": "Failed",
  "turn:cancelled": "Stopped",
  "turn:waitingApproval": "Waiting for approval",
  // why a turn was cancelled (`turn/cancelled` reason)
  "reason:interrupted": "you interrupted it",
  "reason:approvalCancelled": "an approval cancelled it",
  "reason:serverShutdown": "the server shut down",
  "reason:threadDeleted": "the thread was deleted",
  // plan todos
  "todo:pending": "To do",
  "todo:in_progress": "In progress",
  "todo:completed": "Done",
  "todo:cancelled": "Dropped",
  // automation tasks (`automation/task/*`)
  "task:pending": "Waiting to run",
  "task:running": "Running…",
  "task:completed": "Done",
  "task:failed": "Failed",
  // queued messages
  "queued:queued": "Queued: runs when the turn ends",
  "queued:guidancePending": "Steering: handed to the running turn",
  // why the queue waits (`thread/queue/updated` paused.reason)
  "queuePaused:interrupted": "Queue paused: you interrupted the turn. Your next message runs after these; remove any you no longer want.",
  "queuePaused:approvalCancelled": "Queue paused: an approval cancelled the turn. Your next message runs after these.",
  "queuePaused:failed": "Queue paused: the turn failed. Your next message runs after these.",
};

/** The words for `word` of `kind` (the word itself when the table has none). */
export function say(kind, word) {
  return WORDS[`${kind}:${word}`] ?? String(word ?? "");
}

/** A turn's footer status: "Done", "Stopped: the server shut down", "Failed: <error>". */
export function turnStatus(status, extra = "") {
  const words = say("turn", status);
  if (!extra) return words;
  return `${words}: ${status === "cancelled" ? say("reason", extra) : extra}`;
}
