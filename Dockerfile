# agent-fleet: one image for every role (`fleet migrate|api|worker|sweeper`).
# TypeScript runs through tsx (a runtime dependency), so there is no build step:
# the image holds the production dependencies and the sources.
FROM node:20-bookworm-slim

ENV NODE_ENV=production
WORKDIR /app

# Dependencies first, so source edits do not reinstall them. `--omit=dev` leaves out
# typescript, vitest, biome, drizzle-kit: nothing at runtime imports them (tsx is in
# "dependencies").
COPY package.json package-lock.json ./
COPY scripts ./scripts
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

# tsconfig.json is read by tsx, so the sources run exactly as they do in development.
COPY tsconfig.json ./
COPY bin ./bin
COPY drizzle ./drizzle
COPY src ./src

# Where the built-in file tools write (FLEET_TOOL_DIR). Created here and owned by the
# runtime user, so a named volume mounted on it starts out writable.
RUN mkdir -p /data/files && chown node:node /data/files
ENV FLEET_TOOL_DIR=/data/files

USER node

# 3000: the HTTP API (PORT; it listens on HOST, 127.0.0.1 unless set — compose sets 0.0.0.0,
# which needs an API key: see docker-compose.yml). 9100: /metrics of a worker or the sweeper (METRICS_PORT).
EXPOSE 3000 9100

ENTRYPOINT ["node", "bin/fleet.js"]
CMD ["--help"]
