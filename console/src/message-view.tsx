/**
 * One message of a transcript (transcript.tsx): its role, seq, time, tool call or result, and
 * its content as text (a tool result that is JSON formatted, json-format.ts).
 */

import { useMemo } from "preact/hooks";
import type { Message } from "./api";
import { formatJson } from "./json-format";
import { Badge, Json, JsonText, Shown, TextBlock, Time } from "./ui";

/**
 * Failed results whose text says the tool was cut short (resume-semantics §3; a cancelled
 * run). A tool that succeeded and printed such a text is not marked.
 */
function resultMark(message: Message): "interrupted" | "cancelled" | undefined {
  if (message.role !== "tool" || message.success !== false) return undefined;
  if (message.content.startsWith("The process stopped while this tool was running")) return "interrupted";
  if (/^Cancelled(:| while running)/.test(message.content)) return "cancelled";
  return undefined;
}

/** A tool result that is JSON is shown formatted. */
function ToolContent({ content }: { content: string }) {
  // Formatted once per content, not at each render: the page renders again at every
  // streamed delta, and a 1 MB result parsed and printed each time froze it.
  // Laid out token by token, not parsed and printed (json-format.ts): a big number, a repeated key
  // stay as the tool wrote them. Not JSON after all (null): shown as text.
  const formatted = useMemo(() => {
    const trimmed = content.trim();
    return trimmed.startsWith("{") || trimmed.startsWith("[") ? formatJson(trimmed) : null;
  }, [content]);
  return formatted === null ? <TextBlock text={content} /> : <JsonText text={formatted} />;
}

export function MessageView({ message }: { message: Message }) {
  const mark = resultMark(message);
  return (
    // biome-ignore lint/a11y/useSemanticElements: an <li> must sit in an <ol>, and its block (a box that contains its layout) sits between (see TRANSCRIPT_BLOCK)
    <div role="listitem" class={`msg ${message.role}${mark ? ` ${mark}` : ""}`} id={`seq-${message.seq}`}>
      <div class="msg-head">
        <span class="seq">{`#${message.seq}`}</span> <strong>{message.role}</strong>
        {message.role === "assistant" && message.stopReason && (
          <Badge
            kind={message.stopReason === "end_turn" ? "ok" : message.stopReason === "tool_use" ? "" : "warn"}
          >
            stop: <Shown text={message.stopReason} />
          </Badge>
        )}
        {message.role === "tool" && (
          <>
            {" "}
            <span class="mono">
              <Shown text={message.name} />
            </span>{" "}
            <span class="muted">
              ← call <Shown text={message.toolCallId} />
            </span>{" "}
            <Badge kind={message.success ? "ok" : "bad"}>{message.success ? "success" : "failed"}</Badge>
            {mark && <Badge kind="bad">{mark}</Badge>}
          </>
        )}
        <span class="spacer" />
        <Time iso={message.createdAt} />
      </div>
      {message.role === "tool" ? (
        <ToolContent content={message.content} />
      ) : (
        message.content !== "" && <TextBlock text={message.content} />
      )}
      {message.toolCalls && message.toolCalls.length > 0 && (
        <ul class="calls">
          {message.toolCalls.map((call) => (
            <li key={call.id}>
              <span class="mono">
                <Shown text={call.name} />
              </span>{" "}
              <span class="muted">
                call <Shown text={call.id} />
              </span>
              <Json value={call.arguments} />
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
