/**
 * The largest request body the API takes, in bytes (contracts §4: a bigger one is a 413):
 * imported histories can be long. Its own module so that the client, which refuses a bigger
 * body before sending it (api-transport.ts), reaches nothing of the server's.
 */
export const BODY_LIMIT = 16 * 1024 * 1024;
