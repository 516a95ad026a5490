/**
 * The session page's actions (session-page.tsx): resume (optionally with another model), send
 * a message (one Idempotency-Key per text, so a lost answer never stores it twice) and cancel
 * (asked first).
 */
import { useRef, useState } from "preact/hooks";
import { api, newIdempotencyKey, paths, type Session } from "./api";
import { ErrorBox, revealed, Shown } from "./ui";

/** What the page asks before it cancels a session (a native dialog: plain text, ids revealed). */
function cancelQuestion(session: Session, running: boolean): string {
  return (
    `Cancel session ${revealed(session.id)}${running ? ` (${session.status})` : ""}?\n\n` +
    "Queued runs are dropped and a running one is aborted (a tool that was running gets a " +
    "cancelled result); the session is then never resumed automatically. A new message re-opens it."
  );
}

export function Actions({ session, onDone }: { session: Session; onDone: () => void }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [info, setInfo] = useState("");
  const [model, setModel] = useState("");
  const [content, setContent] = useState("");
  /**
   * The Idempotency-Key of the message in the box, kept until it is sent or changed: a send
   * whose answer was lost (a gateway's 504, a cut connection) leaves the text in the box, and
   * sending it again must not store it twice (the API answers the first send's answer).
   */
  const sendKey = useRef<string | null>(null);
  const act = async (what: () => Promise<string>) => {
    setBusy(true);
    setError(null);
    setInfo("");
    try {
      setInfo(await what());
      onDone();
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };
  const running = session.status === "running" || session.status === "queued";
  return (
    <section aria-labelledby="actions-title" class="actions">
      <h2 id="actions-title">Actions</h2>
      <ErrorBox error={error} />
      {info && (
        <p class="info" role="status">
          <Shown text={info} />
        </p>
      )}
      <div class="action-grid">
        <form
          onSubmit={(event) => {
            event.preventDefault();
            void act(async () => {
              let body: { model?: unknown } = {};
              if (model.trim()) {
                try {
                  body = { model: JSON.parse(model) };
                } catch (parseError) {
                  throw new Error(`MODEL is not valid JSON: ${(parseError as Error).message}`);
                }
              }
              const answer = await api<{ runId: string; kind: string }>(
                "POST",
                paths.resume(session.id),
                body,
              );
              return `Resume queued (${answer.kind}), run ${answer.runId}.`;
            });
          }}
        >
          <label for="resume-model">Resume — with another model (optional JSON MODEL; empty: the same)</label>
          <textarea
            id="resume-model"
            rows={4}
            value={model}
            onInput={(event) => setModel(event.currentTarget.value)}
            placeholder='{ "provider": "openai", "model": "…" }'
            spellcheck={false}
          />
          <button type="submit" disabled={busy}>
            Resume
          </button>
        </form>
        <form
          onSubmit={(event) => {
            event.preventDefault();
            void act(async () => {
              sendKey.current ??= newIdempotencyKey();
              const answer = await api<{ runId: string }>(
                "POST",
                paths.messages(session.id),
                { content },
                { idempotencyKey: sendKey.current },
              );
              sendKey.current = null;
              setContent("");
              return `Message sent, run ${answer.runId}.`;
            });
          }}
        >
          <label for="send-content">Send a message</label>
          <textarea
            id="send-content"
            dir="auto"
            rows={4}
            value={content}
            onInput={(event) => {
              // Another text is another message: a key of its own.
              if (event.currentTarget.value !== content) sendKey.current = null;
              setContent(event.currentTarget.value);
            }}
            required
          />
          <button type="submit" disabled={busy || content.trim() === ""}>
            Send
          </button>
        </form>
        <div>
          <p class="muted">
            Cancel drops queued runs and aborts a running one; the session is then never resumed
            automatically.
          </p>
          <button
            type="button"
            class="danger"
            disabled={busy}
            onClick={() => {
              // One misclick must not cancel a production run: asked first, nothing sent on "Cancel".
              if (!confirm(cancelQuestion(session, running))) return;
              void act(async () => {
                const answer = await api<{ cancelled: boolean; status: string }>(
                  "POST",
                  paths.cancel(session.id),
                  {},
                );
                return answer.cancelled ? "Cancelled." : `Nothing to cancel (${answer.status}).`;
              });
            }}
          >
            Cancel session{running ? " (running)" : ""}
          </button>
        </div>
      </div>
    </section>
  );
}
