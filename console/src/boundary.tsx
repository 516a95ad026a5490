/**
 * An error boundary: a part of a page whose render throws (an answer of a shape the console
 * does not expect: a date that is not one, a message whose content is not text) is replaced by
 * a note of what failed and why, with "Try again"; the rest of the page, and the console's
 * header, stay usable. Without one the exception escaped Preact's render and the part stayed
 * blank, nothing said, until a reload. Its failure is also logged to the browser's console.
 */
import { Component, type ComponentChildren } from "preact";
import { failureText, Shown } from "./ui";

/** `what`: the part, as a sentence begins ("The transcript"); `resetKey`: when it changes, the part is tried again. */
type Props = { what: string; resetKey?: string; children: ComponentChildren };
type State = { failure: unknown; failed: boolean };

/** What the note says of a render's exception: its kind (TypeError, RangeError, …) and its words. */
export function renderFailureText(failure: unknown): string {
  const text = failureText(failure);
  return failure instanceof Error && failure.name !== "Error" && !text.startsWith(failure.name)
    ? `${failure.name}: ${text}`
    : text;
}

export class Boundary extends Component<Props, State> {
  override state: State = { failure: null, failed: false };

  static override getDerivedStateFromError(failure: unknown): Partial<State> {
    return { failure, failed: true };
  }

  override componentDidCatch(failure: unknown): void {
    console.error(`the console could not show ${this.props.what}:`, failure);
  }

  override componentDidUpdate(previous: Props): void {
    if (this.state.failed && previous.resetKey !== this.props.resetKey)
      this.setState({ failure: null, failed: false });
  }

  override render() {
    if (!this.state.failed) return this.props.children;
    return (
      <div class="error boundary" role="alert">
        <p>
          {this.props.what} could not be shown (<Shown text={renderFailureText(this.state.failure)} />
          ). The rest of the page still works.
        </p>
        <button type="button" onClick={() => this.setState({ failure: null, failed: false })}>
          Try again
        </button>
      </div>
    );
  }
}
