/**
 * Right-to-left text from models, tools and callers. The page reads left to right, and the
 * bidi algorithm lets a right-to-left word take the neutral characters and numbers beside
 * it: in `"עברית": 5` the value is drawn left of its key; an endpoint `ملف` with a model `7`
 * read `7:ملف`. Each piece of text from elsewhere is therefore shown direction-isolated (a
 * `<bdi>`, ui.tsx), so that it reads in its own direction without moving what is around it.
 * These are the pure parts: which text holds right-to-left letters, and where the strings
 * of formatted JSON are, so that only those with such letters are isolated (a 1 MB result
 * without any stays one text node).
 */
/**
 * Letters and marks of the right-to-left scripts (Hebrew, Arabic, Syriac, Thaana, N'Ko,
 * Samaritan, Mandaic and their supplements and presentation forms, and the right-to-left
 * blocks of the supplementary planes), Arabic-Indic digits, and the marks U+200F and U+061C.
 */
const RTL = /[\u0590-\u08FF\u200F\uFB1D-\uFDFF\uFE70-\uFEFE\u{10800}-\u{10FFF}\u{1E800}-\u{1EFFF}]/u;

/** Whether `text` holds a right-to-left letter (or mark or Arabic digit). */
export function hasRightToLeft(text: string): boolean {
  return RTL.test(text);
}

/** A JSON string literal (with its quotes) in `JSON.stringify`'s output. */
const JSON_STRING = /"(?:[^"\\]|\\.)*"/g;

/**
 * Formatted JSON cut into its own text and the insides of its strings that hold
 * right-to-left letters (`{ isolate }`, quotes left outside), to be shown isolated: a key
 * or a value in Hebrew then stays where it is written. JSON without any is `[json]`.
 */
export function jsonPieces(json: string): (string | { isolate: string })[] {
  if (!hasRightToLeft(json)) return [json];
  const pieces: (string | { isolate: string })[] = [];
  let from = 0;
  for (const match of json.matchAll(JSON_STRING)) {
    if (!hasRightToLeft(match[0])) continue;
    const start = match.index + 1;
    pieces.push(json.slice(from, start), { isolate: json.slice(start, start + match[0].length - 2) });
    from = start + match[0].length - 2;
  }
  pieces.push(json.slice(from));
  return pieces.filter((piece) => piece !== "");
}

/**
 * Lines of formatted JSON laid out together (ui.tsx JsonText), each block a box of its own:
 * Chromium lays out one box's lines of right-to-left text all at once, in time that grows
 * faster than their count (100,000 isolated Hebrew strings in one `<pre>` took 24 s to show;
 * in blocks of 100 lines, about as many seconds fewer as there are blocks). Not one box per
 * string, or per line: as costly again in elements.
 */
export const JSON_BLOCK_LINES = 100;

/**
 * Formatted JSON cut between lines into blocks of JSON_BLOCK_LINES lines (the last may be
 * shorter); joined with newlines they are the JSON. A JSON string holds no raw newline, so no
 * string is cut.
 */
export function jsonLineBlocks(json: string): string[] {
  const blocks: string[] = [];
  let from = 0;
  while (from <= json.length) {
    let end = from;
    for (let line = 0; line < JSON_BLOCK_LINES; line++) {
      const next = json.indexOf("\n", end);
      if (next < 0) {
        end = json.length;
        break;
      }
      end = line === JSON_BLOCK_LINES - 1 ? next : next + 1;
    }
    if (end === json.length) {
      blocks.push(json.slice(from));
      break;
    }
    blocks.push(json.slice(from, end));
    from = end + 1;
  }
  return blocks;
}
