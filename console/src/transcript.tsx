/**
 * A session's transcript (contracts §14): every message, its content in the page's text. A
 * long one is rendered a block at a time, one block per slice of idle time, so that the page
 * stays usable while it catches up with what was read (50,000 messages rendered at once
 * blocked the page for over 20 s); a block is rendered again only when its messages change,
 * so a live append renders the last block only. Not `content-visibility: auto`: it made the
 * first render cheaper, but took the messages off screen out of the page's text (`innerText`,
 * what a copy of the page holds) and laid each part out only when scrolled to.
 */
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import type { Message } from "./api";
import { MessageBlock } from "./message-block";
import type { ReadRetry } from "./read-retry";
import { Badge, Empty, failureText, Shown, TextBlock } from "./ui";

/**
 * Messages per block, each block laid out on its own (`contain: content`, style.css): a live
 * append renders the last block again, no other; a slice added lays out the transcript's
 * blocks, not each of its messages again (as one list, 50,000 messages took 87 s of layout
 * to catch up, with tasks up to 8.4 s; in blocks 29 s, tasks up to 1.6 s, on a loaded machine).
 * To assistive technology the transcript is still one list: the blocks are `role="none"`
 * boxes inside one `role="list"`, each message a `listitem` (when each block was an `<ol>`,
 * a screen reader announced a list of 50 items, then another, …). Not `display: contents`
 * on the blocks, which would keep `<ol>`/`<li>` valid but leave no box to contain.
 */
export const TRANSCRIPT_BLOCK = 50;

/** Messages rendered per idle slice while the transcript catches up. */
export const TRANSCRIPT_SLICE = 250;

/** A gap this small (live appends) is rendered at once, not in the next slice. */
const LIVE_GAP = 20;

/** Runs `work` when the browser is idle (within 100 ms), or soon where it cannot tell; returns a cancel. */
function whenIdle(work: () => void): () => void {
  if (typeof requestIdleCallback === "function") {
    const handle = requestIdleCallback(work, { timeout: 100 });
    return () => cancelIdleCallback(handle);
  }
  const timer = setTimeout(work, 16);
  return () => clearTimeout(timer);
}

/**
 * How many of `total` messages to render: one slice more when the browser is idle, until all are; a
 * few more (live appends) at once.
 */
export function useRenderedCount(total: number): number {
  const [rendered, setRendered] = useState(() => Math.min(total, TRANSCRIPT_SLICE));
  useEffect(() => {
    if (rendered >= total) return;
    return whenIdle(() => setRendered((n) => nextRendered(n, total)));
  }, [rendered, total]);
  return total - rendered <= LIVE_GAP ? total : rendered;
}

/** The next count to render: up to the end of the next slice, and no more than there are. */
export function nextRendered(rendered: number, total: number): number {
  return Math.min(total, (Math.floor(rendered / TRANSCRIPT_SLICE) + 1) * TRANSCRIPT_SLICE);
}

/**
 * A link to one message (`…/sessions/ID#seq-N`, the id each message has) lands on it once it is
 * rendered: the browser looks for the element as the page loads, before the transcript is read
 * and rendered a slice at a time, and so left the page at its top. Once per fragment: the
 * person's own scrolling afterwards is left alone.
 */
function useScrollToLinkedMessage(rendered: number): void {
  const landed = useRef<string | null>(null);
  useEffect(() => {
    const target = location.hash;
    if (!/^#seq-\d+$/.test(target) || landed.current === target) return;
    const element = document.getElementById(target.slice(1));
    if (!element) return;
    landed.current = target;
    element.scrollIntoView({ block: "start" });
  }, [rendered]);
}

export function Transcript({
  messages,
  streaming,
  reading,
  retry = null,
}: {
  messages: Message[];
  streaming: string;
  /** More messages are being read (the first read of a long session goes a page at a time). */
  reading: boolean;
  /** A read of the next page failed and is tried again (session-page.tsx). */
  retry?: ReadRetry | null;
}) {
  const rendered = useRenderedCount(messages.length);
  useScrollToLinkedMessage(rendered);
  // Rendered again only when the messages change, not at every streamed delta: a message
  // holds thousands of elements when its JSON is full of isolated right-to-left strings.
  const blocks = useMemo(() => {
    const out = [];
    for (let from = 0; from < rendered; from += TRANSCRIPT_BLOCK)
      out.push(
        <MessageBlock
          key={from}
          messages={messages.slice(from, Math.min(rendered, from + TRANSCRIPT_BLOCK))}
        />,
      );
    return out;
  }, [messages, rendered]);
  const behind = reading || rendered < messages.length;
  return (
    <section aria-labelledby="transcript-title" aria-busy={behind}>
      <h2 id="transcript-title">
        Transcript ({messages.length} message{messages.length === 1 ? "" : "s"}
        {reading ? " so far" : ""})
      </h2>
      {messages.length === 0 && !reading && <Empty>No messages yet.</Empty>}
      {behind && (
        <p class="muted transcript-progress">
          {reading ? "Reading the transcript" : "Showing the transcript"}: {rendered} of {messages.length}{" "}
          messages shown…
        </p>
      )}
      {retry && (
        <p class="error transcript-retry" role="status">
          A read of the transcript failed (<Shown text={failureText(retry.failure)} />
          ); trying again in {Math.round(retry.inMs / 1000)} s (attempt {retry.attempt}). The transcript is
          not complete until then.
        </p>
      )}
      {/* biome-ignore lint/a11y/useSemanticElements: an <ol> holds only <li>, and the blocks between are boxes of their own (see TRANSCRIPT_BLOCK) */}
      <div class="transcript" role="list" aria-label="Messages">
        {blocks}
      </div>
      {streaming && (
        <div class="msg assistant streaming" aria-live="polite">
          <div class="msg-head">
            <strong>assistant</strong> <Badge kind="busy">streaming</Badge>
          </div>
          <TextBlock text={streaming} />
        </div>
      )}
    </section>
  );
}
