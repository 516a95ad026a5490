/**
 * The agent-fleet console (contracts §14): a page over the `/v1` API. The key is asked for
 * when the API answers 401 and kept for this tab's session (sessionStorage); with the API in
 * its loopback dev mode no key is needed.
 */
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { keyProblem, onAuthRequired, storedKey, storeKey } from "./api";
import { BatchPageView } from "./batch-page";
import { Boundary } from "./boundary";
import { SessionPageView } from "./session-page";
import { SessionsPage } from "./sessions-page";
import "./style.css";
import { Link, listHref, parseRoute, type Route, Shown } from "./ui";

/**
 * `asked`: the API answered 401 (else the person chose to change the key); `refused`: the
 * API's words for the key it refused, or null when the request carried none.
 */
function KeyForm({ onDone, asked, refused }: { onDone: () => void; asked: boolean; refused: string | null }) {
  const [value, setValue] = useState("");
  const [problem, setProblem] = useState<string | null>(null);
  return (
    <section class="key-form" aria-labelledby="key-title">
      <h1 id="key-title">API key</h1>
      {asked && refused !== null && (
        <p class="error" role="alert">
          The API refused the key in use (<Shown text={refused} />
          ). Enter another.
        </p>
      )}
      <p>
        {asked && refused === null ? "This API needs a key. " : ""}Enter an API key (an operator creates one
        with <code>fleet keys create --tenant NAME</code>). It is kept in this browser tab until it is closed,
        and sent only to this API.
      </p>
      <form
        onSubmit={(event) => {
          event.preventDefault();
          const key = value.trim();
          if (!key) return;
          const refused = keyProblem(key);
          setProblem(refused);
          if (refused) return;
          storeKey(key);
          onDone();
        }}
      >
        {problem && (
          <p class="error" role="alert">
            {problem}
          </p>
        )}
        <label for="api-key">Key</label>{" "}
        <input
          id="api-key"
          type="password"
          autocomplete="off"
          value={value}
          onInput={(event) => setValue(event.currentTarget.value)}
          // biome-ignore lint/a11y/noAutofocus: the one thing to do on this page
          autoFocus
        />{" "}
        <button type="submit">Use key</button>
      </form>
    </section>
  );
}

/** What tells one page from another (a new one: its part of the page is tried again). */
function routeKey(route: Route): string {
  if (route.page === "sessions") return `sessions?${route.query}`;
  return route.page === "unknown" ? `unknown:${route.path}` : `${route.page}:${route.id}`;
}

function App() {
  const [route, setRoute] = useState<Route>(() => parseRoute(location));
  const [needKey, setNeedKey] = useState(false);
  const [refused, setRefused] = useState<string | null>(null);
  const [changingKey, setChangingKey] = useState(false);
  const [generation, setGeneration] = useState(0);

  useEffect(() => {
    const onPop = () => setRoute(parseRoute(location));
    addEventListener("popstate", onPop);
    const off = onAuthRequired((why) => {
      setRefused(why);
      setNeedKey(true);
    });
    return () => {
      removeEventListener("popstate", onPop);
      off();
    };
  }, []);

  const keyDone = () => {
    setNeedKey(false);
    setChangingKey(false);
    setGeneration((n) => n + 1);
  };
  const hasKey = storedKey() !== null;
  let page = null;
  if (needKey || changingKey) page = <KeyForm onDone={keyDone} asked={needKey} refused={refused} />;
  else if (route.page === "sessions") page = <SessionsPage query={route.query} />;
  else if (route.page === "session") page = <SessionPageView id={route.id} />;
  else if (route.page === "batch") page = <BatchPageView id={route.id} />;
  else
    page = (
      <section>
        <h1>Page not found</h1>
        <p>
          The console has no page{" "}
          <span class="mono">
            <Shown text={route.path} />
          </span>
          .
        </p>
      </section>
    );
  return (
    <>
      <header class="top">
        <Link href="/console" class="brand">
          agent-fleet console
        </Link>
        <nav aria-label="Console">
          <Link href={listHref()}>Sessions</Link>
          <Link href={listHref({ status: "parked" })}>Parked queue</Link>
          <Link href={listHref({ status: "running" })}>Running</Link>
        </nav>
        <span class="spacer" />
        <button type="button" class="link" onClick={() => setChangingKey(true)}>
          {hasKey ? "Change key" : "Enter key"}
        </button>
        {hasKey && (
          <button
            type="button"
            class="link"
            onClick={() => {
              storeKey(null);
              keyDone();
            }}
          >
            Forget key
          </button>
        )}
      </header>
      <main key={`${generation}`}>
        {/* A page whose render throws says so; the header above stays (boundary.tsx). Another page: a new try. */}
        <Boundary what="This page" resetKey={needKey || changingKey ? "key" : routeKey(route)}>
          {page}
        </Boundary>
      </main>
    </>
  );
}

render(<App />, document.getElementById("app")!);
