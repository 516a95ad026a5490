/** What a test sees of an HTTP answer: the status, the body as text and, when it parses, as JSON. */
// biome-ignore lint/suspicious/noExplicitAny: tests read answer bodies of every shape
export type Answer = { status: number; json: any; text: string; contentType: string | null };

export async function readAnswer(response: Response): Promise<Answer> {
  const text = await response.text();
  let json: unknown;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: response.status, json, text, contentType: response.headers.get("content-type") };
}
