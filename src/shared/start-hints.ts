/**
 * How to start the Postgres or Redis a command could not reach, for the one line it prints.
 * The commands work where the package is installed: `docker run` needs no file, while the
 * compose file (`docker compose up -d postgres`) exists only in a checkout, which the npm
 * package ships no `docker-compose.yml` of. The port is the URL's, so the server started
 * is the one the URL names when it names this machine.
 */

/** The URL's port, or `fallback` when it names none (or is no URL: a cluster's seed list). */
function portOf(url: string, fallback: string): string {
  try {
    return new URL(url).port || fallback;
  } catch {
    return fallback;
  }
}

/** The URL's user when it is a plain name other than `postgres` (the image's own user). */
function postgresUser(url: string): string | null {
  try {
    const user = decodeURIComponent(new URL(url).username);
    return /^[A-Za-z_][A-Za-z0-9_]*$/.test(user) && user !== "postgres" ? user : null;
  } catch {
    return null;
  }
}

export function startPostgresHint(url: string): string {
  const user = postgresUser(url);
  const as = user === null ? "" : ` -e POSTGRES_USER=${user}`;
  return (
    `\`docker run -d -p 127.0.0.1:${portOf(url, "5432")}:5432 -e POSTGRES_HOST_AUTH_METHOD=trust${as} postgres:16\`, ` +
    "`service postgresql start`, or `docker compose up -d postgres` in a checkout"
  );
}

export function startRedisHint(url: string): string {
  const port = /^rediss?:\/\//.test(url) ? portOf(url, "6379") : "6379";
  return (
    `\`docker run -d -p 127.0.0.1:${port}:6379 redis:7\`, \`redis-server --port ${port} --daemonize yes\`, ` +
    "or `docker compose up -d redis` in a checkout"
  );
}
