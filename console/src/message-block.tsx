/**
 * A block of a transcript's messages (transcript.tsx TRANSCRIPT_BLOCK), and what it shows when
 * one of them cannot be rendered (a message of a shape the console does not expect: content
 * that is not text, a time that is not one). One error boundary around the whole transcript
 * hid every message for that one; a boundary per message was judged too costly at 50,000
 * messages. So each block is its own boundary, and a block that failed renders again with a
 * boundary around each of its messages: the one that cannot be rendered says so, in its place
 * in the list, and every other message is shown. A transcript without such a message pays for
 * one class component per block (1,000 at 50,000 messages), no more.
 */
import { Component } from "preact";
import type { Message } from "./api";
import { renderFailureText } from "./boundary";
import { MessageView } from "./message-view";
import { Shown } from "./ui";

type BlockProps = { messages: Message[] };

/**
 * A block of messages, rendered again only when they change: another first or last message,
 * or another count (messages are only ever appended; a page that reads the session whole
 * again has new objects throughout); or once it failed, when it renders again guarded.
 */
export class MessageBlock extends Component<BlockProps, { guarded: boolean }> {
  override state = { guarded: false };

  static override getDerivedStateFromError(): { guarded: boolean } {
    return { guarded: true };
  }

  override shouldComponentUpdate(next: BlockProps, nextState: { guarded: boolean }): boolean {
    const was = this.props.messages;
    const is = next.messages;
    return (
      nextState.guarded !== this.state.guarded ||
      was.length !== is.length ||
      was[0] !== is[0] ||
      was.at(-1) !== is.at(-1)
    );
  }

  override render() {
    const { messages } = this.props;
    const { guarded } = this.state;
    return (
      <div class="transcript-block" role="none">
        {messages.map((message) =>
          guarded ? (
            <GuardedMessage key={message.seq} message={message} />
          ) : (
            <MessageView key={message.seq} message={message} />
          ),
        )}
      </div>
    );
  }
}

/** One message in a boundary of its own: when it cannot be rendered, a note in its place. */
class GuardedMessage extends Component<{ message: Message }, { failure: unknown; failed: boolean }> {
  override state = { failure: null as unknown, failed: false };

  static override getDerivedStateFromError(failure: unknown): { failure: unknown; failed: boolean } {
    return { failure, failed: true };
  }

  override componentDidCatch(failure: unknown): void {
    console.error(`the console could not show message #${this.props.message.seq}:`, failure);
  }

  override render() {
    const { message } = this.props;
    if (!this.state.failed) return <MessageView message={message} />;
    return (
      // biome-ignore lint/a11y/useSemanticElements: a listitem of the transcript's list, as MessageView's
      <div role="listitem" class="msg unshown" id={`seq-${message.seq}`}>
        <div class="error boundary" role="alert">
          <p>
            Message #<Shown text={String(message.seq)} /> could not be shown (
            <Shown text={renderFailureText(this.state.failure)} />
            ). The rest of the transcript is shown.
          </p>
          <button type="button" onClick={() => this.setState({ failure: null, failed: false })}>
            Try again
          </button>
        </div>
      </div>
    );
  }
}
