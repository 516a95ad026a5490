# agent-fleet: one image for every role (`fleet migrate|api|worker|sweeper`).
# The first stage compiles the TypeScript to JavaScript (`npm run build` → dist/); the image
# runs that with the production dependencies only: no TypeScript, no tsx at runtime.

# --- build: all dependencies, the sources, the compiler ---
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
COPY scripts ./scripts
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json tsconfig.cjs.json ./
COPY src ./src
# The console (a Vite build of console/ into dist/console, served by the API under /console).
COPY console ./console
RUN npm run build

# --- the image ---
FROM node:20-bookworm-slim

ENV NODE_ENV=production
WORKDIR /app

# tini runs as PID 1 and starts node under it (ENTRYPOINT below): it forwards signals and
# reaps orphaned processes, which node as PID 1 does not (a signal node has no handler for
# yet does nothing; a tool's subprocess that outlives it stays a zombie). Compose's
# `init: true` did that only there: `docker run` without --init and Kubernetes have no such switch.
RUN apt-get update && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/*

# Dependencies first, so source edits do not reinstall them. `--omit=dev` leaves out
# typescript, tsx, vitest, biome, drizzle-kit: the compiled code imports none of them.
# scripts/ holds the postinstall step (patch-postgres.mjs).
COPY package.json package-lock.json ./
COPY scripts ./scripts
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

# bin/fleet.js runs dist/src/cli.js; the migrations are read from drizzle/ at runtime;
# esm-only.cjs is what `require("agent-fleet")` finds (package.json exports).
COPY bin ./bin
COPY esm-only.cjs ./
COPY drizzle ./drizzle
COPY --from=build /app/dist ./dist

# Where the built-in file tools write (FLEET_TOOL_DIR). Created here and owned by the
# runtime user, so a named volume mounted on it starts out writable.
RUN mkdir -p /data/files && chown node:node /data/files
ENV FLEET_TOOL_DIR=/data/files

USER node

# 3000: the HTTP API (PORT; it listens on HOST, 127.0.0.1 unless set — compose sets 0.0.0.0,
# which needs an API key: see docker-compose.yml). 9100: /metrics of a worker or the sweeper (METRICS_PORT).
EXPOSE 3000 9100

ENTRYPOINT ["/usr/bin/tini", "--", "node", "bin/fleet.js"]
CMD ["--help"]
