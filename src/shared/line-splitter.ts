/**
 * The lines of a text that arrives in pieces: the client's Server-Sent Events and NDJSON
 * readers (producer/text-lines.ts) and the console's event stream (console/src/event-parser.ts,
 * which bundles this file: it uses nothing of Node's or the browser's). A line ends at `\r\n`,
 * `\n` or `\r`, also when `\r\n` is split across two pieces. Each piece is searched once: the
 * part of a line that came before is kept as pieces and joined when its end arrives, so a line
 * of many megabytes costs time in proportion to its size (searching the whole buffer again for
 * every chunk took 3 s for one 10 MB event and 35 s for 30 MB).
 */
export type LineSplitter = {
  /** The lines `text` ends, in order (consume them all before the next push). */
  push(text: string): Generator<string>;
  /** The text after the last line end (the input ended without one), or undefined. */
  rest(): string | undefined;
};

export function lineSplitter(): LineSplitter {
  let pieces: string[] = [];
  // The last piece ended with `\r`: a `\n` that starts the next one belongs to it.
  let afterCr = false;
  return {
    *push(text) {
      if (text === "") return;
      let start = afterCr && text.startsWith("\n") ? 1 : 0;
      afterCr = false;
      const ends = /\r\n|\n|\r/g;
      ends.lastIndex = start;
      for (let end = ends.exec(text); end; end = ends.exec(text)) {
        pieces.push(text.slice(start, end.index));
        const line = pieces.length === 1 ? (pieces[0] as string) : pieces.join("");
        pieces = [];
        start = end.index + end[0].length;
        if (end[0] === "\r" && start === text.length) afterCr = true;
        yield line;
      }
      if (start < text.length) pieces.push(text.slice(start));
    },
    rest() {
      if (pieces.length === 0) return undefined;
      const line = pieces.join("");
      pieces = [];
      return line;
    },
  };
}
