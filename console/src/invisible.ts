/**
 * Characters that change how text reads without showing themselves: bidi controls (a
 * right-to-left override makes `exe.txt` read `txt.exe`), zero-width and other invisible
 * format characters (two names that look the same differ), control characters and the
 * invisible tag characters (text hidden from the reader, not from a model). Text from models,
 * tools and callers shows each of them as its code point, `‹U+202E›`, so that a person sees
 * what is there and the text reads in the order it is written.
 *
 * Left as they are, because ordinary text needs them and they cannot reverse a run of
 * letters: the joiners U+200C and U+200D (emoji sequences such as 👩‍💻, Persian and Indic
 * words) and the implicit direction marks U+200E, U+200F and U+061C (right-to-left text
 * typed on phones is full of them; they only place neutral characters such as "." beside them).
 */
const CLASS =
  "[" +
  "\\u0000-\\u0008\\u000B\\u000C\\u000E-\\u001F\\u007F-\\u009F" + // controls but tab, newline, CR
  "\\u00AD\\u034F\\u115F\\u1160\\u17B4\\u17B5\\u180B-\\u180F" + // soft hyphen, invisible letters (not the Arabic letter mark U+061C)
  "\\u200B" + // zero-width space (not the joiners U+200C, U+200D or the marks U+200E, U+200F)
  "\\u2028-\\u202E" + // line and paragraph separators; LRE, RLE, PDF, LRO, RLO
  "\\u2060-\\u206F" + // word joiner, invisible operators; LRI, RLI, FSI, PDI; deprecated format
  "\\u3164\\uFEFF\\uFFA0\\uFFF9-\\uFFFB" + // Hangul fillers, zero-width no-break space, annotations
  "\\uFE00-\\uFE0D\\u{E0100}-\\u{E01EF}" + // variation selectors but the emoji ones (U+FE0E, U+FE0F): a run of them after a letter hides bytes
  "\\u{1D173}-\\u{1D17A}\\u{E0000}-\\u{E007F}" + // musical format controls; tag characters
  "]";
/** For `test` (not global: a global one keeps its place between calls, and `matchAll` starts there). */
const ANY_INVISIBLE = new RegExp(CLASS, "u");
const EACH_INVISIBLE = new RegExp(CLASS, "gu");

/** How an invisible character is shown: its code point, `‹U+202E›`. */
export function codePointLabel(char: string): string {
  return `‹U+${char.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}›`;
}

/** Whether `text` holds a character that `revealed` shows as its code point. */
export function hasInvisible(text: string): boolean {
  return ANY_INVISIBLE.test(text);
}

/**
 * How many invisible characters of one text are shown in a marked box each; the rest are
 * written as their code points in plain text. A box is an element: a tool result of 100,000
 * zero-width spaces was 100,000 of them in one line, and its page took 45 s to show.
 */
export const MAX_MARKED = 1_000;

/**
 * `text` cut at its invisible characters: the visible runs as they are, each invisible
 * character as `{ mark: "‹U+202E›" }`, the first MAX_MARKED of them; after those, the rest of
 * the text as one string, each invisible character in it written as its code point
 * (`revealed`). Text without any is `[text]`.
 */
export function revealedParts(text: string): (string | { mark: string })[] {
  if (!hasInvisible(text)) return [text];
  const parts: (string | { mark: string })[] = [];
  let from = 0;
  let marked = 0;
  for (const match of text.matchAll(EACH_INVISIBLE)) {
    if (marked === MAX_MARKED) {
      parts.push(revealed(text.slice(from)));
      return parts;
    }
    if (match.index > from) parts.push(text.slice(from, match.index));
    parts.push({ mark: codePointLabel(match[0]) });
    marked += 1;
    from = match.index + match[0].length;
  }
  if (from < text.length) parts.push(text.slice(from));
  return parts;
}

/** `text` with each invisible character written as its code point (for attributes, titles). */
export function revealed(text: string): string {
  return hasInvisible(text) ? text.replace(EACH_INVISIBLE, codePointLabel) : text;
}

/** A code point as `codePointLabel` writes it. */
const LABEL = /‹U\+([0-9A-F]{4,6})›/g;

/**
 * `text` with each `‹U+202E›` that stands for an invisible character turned back into that
 * character: what a person typed or pasted from the page (which shows such characters so)
 * means what the page showed. A label of a visible character (`‹U+0041›`) stays as written.
 */
export function unrevealed(text: string): string {
  return text.replace(LABEL, (label, hex: string) => {
    const code = Number.parseInt(hex, 16);
    if (code > 0x10ffff) return label;
    const char = String.fromCodePoint(code);
    return hasInvisible(char) ? char : label;
  });
}

/** `text` without its invisible characters. */
export function withoutInvisible(text: string): string {
  return text.replace(EACH_INVISIBLE, "");
}

/**
 * `text` of a block (a message, a tool's output) with every line break as `\n`, which is the
 * one a `<pre>` breaks at in every browser: a lone CR (`"a\rb"`, old Mac files, progress
 * output) showed as a space, one line. CRLF is one break. The line and paragraph separators
 * U+2028 and U+2029 keep their mark (‹U+2028›, `revealedParts`) and break the line after it.
 */
export function withLineBreaks(text: string): string {
  return /[\r\u2028\u2029]/.test(text)
    ? text.replace(/\r\n?|[\u2028\u2029]/g, (m) => (m[0] === "\r" ? "\n" : `${m}\n`))
    : text;
}
