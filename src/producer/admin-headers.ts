/**
 * What every answer under `/admin` (Bull Board) says to the browser. The board is served on
 * the console's origin, whose tab keeps a tenant's API key in sessionStorage: its page may
 * load only its own scripts, styles, images and fonts and talk only to its own API (no other
 * host: Bull Board's page asked Google Fonts for its font, admin-board.ts strips that link);
 * it is framed by no page (clickjacking), sends no Referer, and nothing of it is kept by a
 * cache. Bull Board's UI needs no inline script and no eval; it sets styles inline (React's
 * `style` props and its loading placeholder), hence `style-src 'unsafe-inline'`, and loads its
 * icons as `data:` images.
 */
import type { FastifyReply } from "fastify";

export const ADMIN_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "manifest-src 'self'",
  "frame-ancestors 'none'",
  "base-uri 'self'",
  "form-action 'none'",
].join("; ");

/** Sets the headers on an /admin answer before it is sent (its 401s and 403s included). */
export function withAdminHeaders(reply: FastifyReply): FastifyReply {
  return reply
    .header("content-security-policy", ADMIN_CSP)
    .header("x-frame-options", "DENY")
    .header("referrer-policy", "no-referrer")
    .header("x-content-type-options", "nosniff")
    .header("cache-control", "no-store");
}
